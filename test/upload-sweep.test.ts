/**
 * What an upload that never became ready left is deleted by its org's directory (OrgDirectory's alarm), once it has
 * been receiving for longer than an upload can, without anyone listing or describing it: every upload is watched from
 * before its first byte. Over the real HTTP API, R2 binding (miniflare's) and directory object, its alarm included.
 */
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { OrgClient, type UploadWatchMessage } from "../src/clients/orgs";
import { until } from "./chaos-helpers";
import { apiJson } from "./helpers";
import { heldUploads } from "./upload-helpers";

const DAY_MS = 24 * 60 * 60 * 1000;
/** When the directory looks at an upload again: a minute after it can no longer be receiving (seven days). */
const SWEEP_AFTER_MS = 7 * DAY_MS + 60_000;

async function keysOf(uploadId: string, org: string): Promise<string[]> {
  return (await env.UPLOADS.list({ prefix: `${org}/${uploadId}/` })).objects.map((o) => o.key).sort();
}

/** The uploads `org`'s directory will look at again, and when. */
async function watched(org: string): Promise<{ upload_id: string; due_at: number }[]> {
  return runInDurableObject(env.ORG_DIRECTORY.getByName(org), (_directory, state) =>
    state.storage.sql
      .exec<{ upload_id: string; due_at: number }>("SELECT upload_id, due_at FROM upload_sweeps ORDER BY upload_id")
      .toArray(),
  );
}

/**
 * Uploads of `org` as they were `daysAgo` days ago (heldUploads). What they tell their watcher is kept in `watches`,
 * for the test to hand to the directory once the upload is in the state to look at.
 */
function uploadsAgo(org: string, daysAgo: number) {
  const watches: UploadWatchMessage[] = [];
  const held = heldUploads({ org, daysAgo, watch: async ({ uploadId, dueAt }) => void watches.push({ uploadId, org, dueAt }) });
  const tellDirectory = async (watch: UploadWatchMessage) => new OrgClient({ env, org }).watchUpload(watch);
  return { ...held, watches, tellDirectory };
}

describe("an org's directory", () => {
  it("deletes an upload whose request died, once it has been receiving too long, though no one lists or describes it", async () => {
    const org = "sweep-dead";
    const { uploads, watches, holding, release, tellDirectory } = uploadsAgo(org, 8);
    // A request that began 8 days ago and never ended (held before its records): its bytes and request record stay.
    const sending = uploads.receive(new Response("id\n1\n").body!, { format: "csv", declaredBytes: 5 }).catch((error: unknown) => error);
    await holding;
    const [dead] = watches;
    const request = JSON.parse(await (await env.UPLOADS.get(`${org}/${dead!.uploadId}/request`))!.text());
    expect(dead!.dueAt).toBe(request.createdAt + SWEEP_AFTER_MS);
    expect(await keysOf(dead!.uploadId, org)).toEqual([`${org}/${dead!.uploadId}/data`, `${org}/${dead!.uploadId}/request`]);
    // A multipart upload begun 8 days ago, a part in, never completed: R2 would abort it, the records would stay.
    const multipart = (await uploads.startMultipart("csv")).uploadId;
    await uploads.receivePart(multipart, 1, new Response("id\n1\n").body!, 5);
    const { r2UploadId } = JSON.parse(await (await env.UPLOADS.get(`${org}/${multipart}/multipart`))!.text());
    expect(watches.map((w) => w.uploadId)).toEqual([dead!.uploadId, multipart]);

    // Their watches reach the directory: both are past due, and its alarm deletes them.
    for (const watch of watches) await tellDirectory(watch);
    await until(
      () => watched(org),
      (rows) => rows.length === 0,
      "the directory to look at both uploads",
    );
    expect(await keysOf(dead!.uploadId, org)).toEqual([]);
    expect(await keysOf(multipart, org)).toEqual([]);
    await expect(env.UPLOADS.resumeMultipartUpload(`${org}/${multipart}/data`, r2UploadId).uploadPart(2, "2\n")).rejects.toThrow();

    // The request, let go, finds its upload gone and keeps nothing.
    release();
    expect(await sending).toMatchObject({ code: "upload_not_found" });
    expect(await keysOf(dead!.uploadId, org)).toEqual([]);
  });

  it("leaves a ready upload alone, and looks at one still receiving again when it would be gone", async () => {
    const org = "sweep-live";
    const { uploads, watches, release, tellDirectory } = uploadsAgo(org, 0);
    release();
    const ready = await uploads.receive(new Response("id\n1\n").body!, { format: "csv", declaredBytes: 5 });
    const receiving = (await uploads.startMultipart("csv")).uploadId;
    const receivingView = await uploads.describe(receiving);
    // Looked at now (as an alarm whose time came early would): neither is swept.
    for (const watch of watches) await tellDirectory({ ...watch, dueAt: Date.now() - 1 });
    const rows = await until(
      () => watched(org),
      (found) => found.length === 1 && found[0]!.due_at > Date.now(),
      "the directory to look at both uploads",
    );
    expect(rows).toEqual([{ upload_id: receiving, due_at: Date.parse(receivingView!.createdAt) + SWEEP_AFTER_MS }]);
    expect(await uploads.describe(ready.uploadId)).toEqual(ready);
    expect(await uploads.describe(receiving)).toEqual(receivingView);
    expect(await runInDurableObject(env.ORG_DIRECTORY.getByName(org), (_d, state) => state.storage.getAlarm())).toBe(rows[0]!.due_at);
  });

  it("watches every upload started over HTTP, in one request or in parts, until a week and a minute after it began", async () => {
    const before = new Set((await watched("dev")).map((row) => row.upload_id));
    const { body: one } = await apiJson("/v1/uploads", { method: "POST", body: "id\n1\n", headers: { "Content-Type": "text/csv" } });
    const { body: parts } = await apiJson("/v1/uploads?multipart=1", { method: "POST", headers: { "Content-Type": "text/csv" } });
    const { body: described } = await apiJson(`/v1/uploads/${parts.uploadId}`);
    const rows = (await watched("dev")).filter((row) => !before.has(row.upload_id));
    expect(rows).toEqual(
      [
        { upload_id: one.uploadId, due_at: Date.parse(one.createdAt) + SWEEP_AFTER_MS },
        { upload_id: parts.uploadId, due_at: Date.parse(described.createdAt) + SWEEP_AFTER_MS },
      ].sort((a, b) => a.upload_id.localeCompare(b.upload_id)),
    );
    const alarm = await runInDurableObject(env.ORG_DIRECTORY.getByName("dev"), (_d, state) => state.storage.getAlarm());
    expect(alarm).toBe(Math.min(...(await watched("dev")).map((row) => row.due_at)));
  });

  it("looks at more uploads than one alarm does in the alarms that follow, until none is left", async () => {
    const org = "sweep-many";
    const directory = new OrgClient({ env, org });
    // Ids of uploads that left nothing (or were deleted): each is looked at, found empty, and forgotten.
    const ids = Array.from({ length: 130 }, (_, i) => `up_${i.toString(16).padStart(32, "0")}`);
    for (const uploadId of ids) await directory.watchUpload({ uploadId, org, dueAt: Date.now() - 1000 });
    await until(
      () => watched(org),
      (rows) => rows.length === 0,
      "the directory to look at all 130",
    );
    expect(await runInDurableObject(env.ORG_DIRECTORY.getByName(org), (_d, state) => state.storage.getAlarm())).toBeNull();
  });
});
