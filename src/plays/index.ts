/** The plays bundled with the Worker, by name. */
import type { PlayDefinition } from "../play/types";
import { demoAccounts } from "./demo-accounts";
import { demoApproval } from "./demo-approval";
import { demoEnrich } from "./demo-enrich";
import { testPlays } from "./testing";

const bundled: PlayDefinition[] = [demoEnrich as PlayDefinition, demoAccounts as PlayDefinition, demoApproval as PlayDefinition];

/** The plays runnable under `env`: the test plays only under the test runner. */
export function playRegistry(env: Env): ReadonlyMap<string, PlayDefinition> {
  const list = env.TROUPE_TEST_MODE === "on" ? [...bundled, ...(testPlays as PlayDefinition[])] : bundled;
  return new Map(list.map((p) => [p.name, p]));
}
