/** Uploads as a test needs them: made as if days ago, with a commit the test lets go of. */
import { env } from "cloudflare:workers";
import { Uploads, type UploadWatcher } from "../src/uploads/uploads";

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * Uploads of `org` as they were `daysAgo` days ago, told to `watch` (as the HTTP routes tell the org's directory)
 * if given. A one-request upload's commit waits for `release`; `holding` resolves once one waits there.
 */
export function heldUploads(options: { org: string; daysAgo: number; watch?: UploadWatcher }) {
  let release!: () => void;
  let held!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const holding = new Promise<void>((resolve) => (held = resolve));
  const faults = {
    check: async () => {
      held();
      await released;
    },
  };
  const { org, daysAgo, watch } = options;
  const uploads = new Uploads({ bucket: env.UPLOADS, org, now: () => Date.now() - daysAgo * DAY_MS, faults, watch });
  return { uploads, holding, release };
}
