/**
 * A DELETE of a multipart upload that lands while its `complete` is between
 * checking the file and writing the record that makes it ready: the upload
 * stays deleted, not brought back ready with no file (a run over it would
 * fail `upload_not_found` at its first read).
 */
import { env } from "cloudflare:workers";
import { afterEach, expect, it } from "vitest";
import { FAULT_OBJECT_NAME } from "../src/clients/faults";
import { clearFaults, setFaults } from "./chaos-helpers";
import { apiJson, startRun, waitForRun } from "./helpers";

const injector = () => env.FAULTS!.getByName(FAULT_OBJECT_NAME);

afterEach(async () => {
  await clearFaults();
  await injector().release(0);
});

async function keysOf(uploadId: string): Promise<string[]> {
  return (await env.UPLOADS.list({ prefix: `dev/${uploadId}/` })).objects.map((o) => o.key).sort();
}

it("keeps an upload deleted while its complete was about to make it ready: the complete answers 404, nothing is left", async () => {
  const started = await apiJson("/v1/uploads?multipart=1", { method: "POST", headers: { "Content-Type": "text/csv" } });
  const { uploadId } = started.body;
  const part = await apiJson(`/v1/uploads/${uploadId}/parts/1`, { method: "PUT", body: "id,name,domain\n1,Ada,example.com\n" });
  expect(part.status).toBe(200);
  await setFaults([{ point: "upload.commit", hold: true, times: 1 }]);
  // The complete joins the parts and checks the file, then waits at its commit.
  const completing = apiJson(`/v1/uploads/${uploadId}/complete`, { method: "POST" });
  await injector().held(0);
  expect(await apiJson(`/v1/uploads/${uploadId}`, { method: "DELETE" })).toEqual({ status: 200, body: { uploadId, deleted: true } });
  await injector().release(0);
  const completed = await completing;
  expect(completed.status, JSON.stringify(completed.body)).toBe(404);
  expect(completed.body.error.code).toBe("upload_not_found");
  expect((await apiJson(`/v1/uploads/${uploadId}`)).status).toBe(404);
  expect(await keysOf(uploadId)).toEqual([]);
  // A run is refused at submit, as for any deleted upload, rather than failing at its first read.
  const run = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input: { upload: uploadId } } });
  expect(run.status).toBe(404);
  expect(run.body.error.code).toBe("upload_not_found");
});

it("still completes an upload no one deleted, the commit held and let go", async () => {
  const started = await apiJson("/v1/uploads?multipart=1", { method: "POST", headers: { "Content-Type": "text/csv" } });
  const { uploadId } = started.body;
  await apiJson(`/v1/uploads/${uploadId}/parts/1`, { method: "PUT", body: "id,name,domain\n1,Ada,example.com\n" });
  await setFaults([{ point: "upload.commit", hold: true, times: 1 }]);
  const completing = apiJson(`/v1/uploads/${uploadId}/complete`, { method: "POST" });
  await injector().held(0);
  await injector().release(0);
  expect((await completing).body).toMatchObject({ uploadId, rows: 1, status: "ready" });
  expect(await keysOf(uploadId)).toEqual([`dev/${uploadId}/data`, `dev/${uploadId}/index`, `dev/${uploadId}/upload`]);
  const run = await waitForRun(await startRun("demo-enrich", { upload: uploadId }));
  expect(run.status).toBe("completed");
});
