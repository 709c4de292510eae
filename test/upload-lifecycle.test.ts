/**
 * An upload between its first byte and its ready record, over the real HTTP API and R2 binding (miniflare's): one
 * whose request is still sending it, or died doing so, is listed `receiving` and a DELETE removes every byte of it;
 * the request then answers 404 rather than bringing it back ready. One receiving for more than seven days is gone,
 * and uploads are listed newest first.
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import type { UploadList } from "../src/api/responses";
import { FAULT_OBJECT_NAME } from "../src/clients/faults";
import { Uploads } from "../src/uploads/uploads";
import { clearFaults, setFaults, until } from "./chaos-helpers";
import { api, apiJson } from "./helpers";
import { heldUploads } from "./upload-helpers";

const CSV = "text/csv";
const injector = () => env.FAULTS!.getByName(FAULT_OBJECT_NAME);
const encode = (text: string) => new TextEncoder().encode(text);

afterEach(async () => {
  await clearFaults();
  await injector().release(0);
});

async function keysOf(uploadId: string, org = "dev"): Promise<string[]> {
  return (await env.UPLOADS.list({ prefix: `${org}/${uploadId}/` })).objects.map((o) => o.key).sort();
}

/** The ids the bucket holds anything of under `org`, whether or not the API lists them. */
async function idsInBucket(org = "dev"): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await env.UPLOADS.list({ prefix: `${org}/`, delimiter: "/", cursor });
    ids.push(...page.delimitedPrefixes.map((prefix) => prefix.slice(`${org}/`.length, -1)));
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return ids;
}

/** Every upload `GET /v1/uploads` lists, page after page. */
async function listed(): Promise<UploadList["uploads"]> {
  const uploads: UploadList["uploads"] = [];
  for (let cursor: string | null = null; ; ) {
    const { body }: { body: UploadList } = await apiJson(`/v1/uploads?limit=100${cursor ? `&cursor=${cursor}` : ""}`);
    uploads.push(...body.uploads);
    if (body.nextCursor === null) return uploads;
    cursor = body.nextCursor;
  }
}

/**
 * A request body the test lets out: `first`, then nothing until `finish` sends `rest` and ends it. `reading`
 * resolves once the Worker has taken `first` and asks for more (the stream is pulled only as it is read).
 */
function heldBody(first: string, rest: string) {
  let asked!: () => void;
  let finish!: () => void;
  const reading = new Promise<void>((resolve) => (asked = resolve));
  const finished = new Promise<void>((resolve) => (finish = resolve));
  let pulls = 0;
  const stream = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        pulls++;
        if (pulls === 1) return controller.enqueue(encode(first));
        asked();
        await finished;
        controller.enqueue(encode(rest));
        controller.close();
      },
    },
    { highWaterMark: 0 },
  );
  return { stream, bytes: encode(first + rest).length, reading, finish };
}

/** The upload a request still sending it made: the one `GET /v1/uploads` lists that was not there `before`. */
async function arriving(before: string[]) {
  const [upload] = await until(
    () => listed().then((uploads) => uploads.filter((u) => !before.includes(u.uploadId))),
    (found) => found.length > 0,
    "the upload being sent to be listed",
    5_000,
  );
  return upload!;
}

describe("an upload whose request has not landed it", () => {
  it("is listed receiving while its body streams without a length, and DELETE aborts its R2 multipart upload: the request then answers 404", async () => {
    const before = (await listed()).map((u) => u.uploadId);
    const body = heldBody("id,name\n1,Ada\n", "2,Grace\n");
    const sending = apiJson("/v1/uploads", { method: "POST", body: body.stream, headers: { "Content-Type": CSV } });
    await body.reading;
    // What a request that dies here leaves is what there is now: it is found, and described alike.
    const upload = await arriving(before);
    expect(upload).toEqual({ uploadId: upload.uploadId, status: "receiving", format: "csv", createdAt: expect.any(String) });
    expect(await apiJson(`/v1/uploads/${upload.uploadId}`)).toEqual({ status: 200, body: upload });
    const { r2UploadId } = JSON.parse(await (await env.UPLOADS.get(`dev/${upload.uploadId}/request`))!.text());
    const multipart = env.UPLOADS.resumeMultipartUpload(`dev/${upload.uploadId}/data`, r2UploadId);

    expect(await apiJson(`/v1/uploads/${upload.uploadId}`, { method: "DELETE" })).toEqual({
      status: 200,
      body: { uploadId: upload.uploadId, deleted: true },
    });
    await expect(multipart.uploadPart(1, "x"), "R2's multipart upload is aborted").rejects.toThrow();
    expect(await keysOf(upload.uploadId)).toEqual([]);

    body.finish();
    const answer = await sending;
    expect(answer.status, JSON.stringify(answer.body)).toBe(404);
    expect(answer.body.error).toMatchObject({ code: "upload_not_found", message: expect.stringContaining("deleted before it was ready") });
    expect(await keysOf(upload.uploadId)).toEqual([]);
    expect((await apiJson(`/v1/uploads/${upload.uploadId}`)).status).toBe(404);
  });

  it("is listed receiving once its bytes are in R2, should its request die before its records: DELETE removes them", async () => {
    const before = await idsInBucket();
    await setFaults([{ point: "upload.commit", hold: true, times: 1 }]);
    // Held where a request killed after storing the file (client gone, isolate evicted) would have stopped.
    const sending = apiJson("/v1/uploads", { method: "POST", body: "id,name\n1,Ada\n", headers: { "Content-Type": CSV } });
    await injector().held(0);
    const [uploadId] = (await idsInBucket()).filter((id) => !before.includes(id));
    expect(await keysOf(uploadId!)).toContain(`dev/${uploadId}/data`);
    const receiving = { uploadId, status: "receiving", format: "csv", createdAt: expect.any(String) };
    expect(await apiJson(`/v1/uploads/${uploadId}`)).toEqual({ status: 200, body: receiving });
    expect(await listed()).toContainEqual(receiving);
    // Its id is listed now, but it takes no part and no complete: it is not a multipart upload.
    for (const [method, path, body] of [
      ["PUT", `/v1/uploads/${uploadId}/parts/1`, "id,name\n2,Bo\n"],
      ["POST", `/v1/uploads/${uploadId}/complete`, undefined],
    ] as const)
      expect(await apiJson(path, { method, body })).toMatchObject({ status: 409, body: { error: { code: "upload_not_multipart" } } });

    expect(await apiJson(`/v1/uploads/${uploadId}`, { method: "DELETE" })).toEqual({ status: 200, body: { uploadId, deleted: true } });
    expect(await keysOf(uploadId!)).toEqual([]);
    await injector().release(0);
    expect((await sending).status).toBe(404);
    expect(await keysOf(uploadId!)).toEqual([]);
  });

  it("stays deleted when DELETE lands as its request is about to make it ready: the request answers 404, a run is refused", async () => {
    const before = await idsInBucket();
    await setFaults([{ point: "upload.commit", hold: true, times: 1 }]);
    const sending = apiJson("/v1/uploads", {
      method: "POST",
      body: "id,name,domain\n1,Ada,example.com\n",
      headers: { "Content-Type": CSV },
    });
    await injector().held(0);
    const [uploadId] = (await idsInBucket()).filter((id) => !before.includes(id));
    expect(await apiJson(`/v1/uploads/${uploadId}`, { method: "DELETE" })).toEqual({ status: 200, body: { uploadId, deleted: true } });
    await injector().release(0);

    const answer = await sending;
    expect(answer.status, JSON.stringify(answer.body)).toBe(404);
    expect(answer.body.error).toMatchObject({ code: "upload_not_found", message: expect.stringContaining("deleted before it was ready") });
    expect(await keysOf(uploadId!)).toEqual([]);
    expect((await apiJson(`/v1/uploads/${uploadId}`)).status).toBe(404);
    expect((await listed()).map((u) => u.uploadId)).not.toContain(uploadId);
    const run = await apiJson("/v1/runs", { method: "POST", json: { play: "demo-enrich", input: { upload: uploadId } } });
    expect(run).toMatchObject({ status: 404, body: { error: { code: "upload_not_found" } } });
  });

  it("stays deleted when DELETE lands while its body, sent with its length, still streams", async () => {
    const before = (await listed()).map((u) => u.uploadId);
    const body = heldBody("id,name\n1,Ada\n", "2,Grace\n");
    const sized = new FixedLengthStream(body.bytes);
    const piped = body.stream.pipeTo(sized.writable);
    const sending = apiJson("/v1/uploads", { method: "POST", body: sized.readable, headers: { "Content-Type": CSV } });
    await body.reading;
    const { uploadId } = await arriving(before);
    expect((await apiJson(`/v1/uploads/${uploadId}`, { method: "DELETE" })).status).toBe(200);

    body.finish();
    await piped;
    const answer = await sending;
    expect(answer.status, JSON.stringify(answer.body)).toBe(404);
    expect(answer.body.error.code).toBe("upload_not_found");
    expect(await keysOf(uploadId)).toEqual([]);
    expect((await apiJson(`/v1/uploads/${uploadId}`)).status).toBe(404);
  });

  it("keeps nothing of its request once ready, sent with its length or without", async () => {
    const file = "id,name\n1,Ada\n";
    for (const body of [file, new Response(file).body!]) {
      const { status, body: ready } = await apiJson("/v1/uploads", { method: "POST", body, headers: { "Content-Type": CSV } });
      expect(status).toBe(201);
      const { uploadId } = ready;
      expect(await keysOf(uploadId)).toEqual([`dev/${uploadId}/data`, `dev/${uploadId}/index`, `dev/${uploadId}/upload`]);
      expect(await apiJson(`/v1/uploads/${uploadId}`)).toEqual({ status: 200, body: ready });
    }
  });
});

describe("an upload receiving for more than seven days", () => {
  /** Uploads of org dev as they were `daysAgo` days ago, a commit held until `release` (a request upload's). */
  const uploadsAgo = (daysAgo: number) => heldUploads({ org: "dev", daysAgo });

  it("is gone: a multipart upload begun 8 days ago is not described or listed, takes no part, and what it left is deleted", async () => {
    const { uploads } = uploadsAgo(8);
    const old = (await uploads.startMultipart("csv")).uploadId;
    await uploads.receivePart(old, 1, new Response("id\n1\n").body!, 5);
    const { r2UploadId } = JSON.parse(await (await env.UPLOADS.get(`dev/${old}/multipart`))!.text());
    const recent = (await uploadsAgo(6).uploads.startMultipart("csv")).uploadId;

    const uploadIds = (await listed()).map((u) => u.uploadId);
    expect(uploadIds).not.toContain(old);
    expect(uploadIds, "six days is not yet too long").toContain(recent);
    expect(await keysOf(old), "deleted once found").toEqual([]);
    await expect(env.UPLOADS.resumeMultipartUpload(`dev/${old}/data`, r2UploadId).uploadPart(2, "2\n")).rejects.toThrow();
    expect((await apiJson(`/v1/uploads/${old}`)).status).toBe(404);
    expect((await apiJson(`/v1/uploads/${old}`, { method: "DELETE" })).status).toBe(404);

    // Found by a describe, a part, a complete or a DELETE as well, before any listing.
    for (const found of [
      (uploadId: string) => api(`/v1/uploads/${uploadId}`),
      (uploadId: string) => api(`/v1/uploads/${uploadId}/parts/2`, { method: "PUT", body: "2\n" }),
      (uploadId: string) => api(`/v1/uploads/${uploadId}/complete`, { method: "POST" }),
      (uploadId: string) => api(`/v1/uploads/${uploadId}`, { method: "DELETE" }),
    ]) {
      const { uploadId } = await uploads.startMultipart("csv");
      await uploads.receivePart(uploadId, 1, new Response("id\n1\n").body!, 5);
      expect((await found(uploadId)).status).toBe(404);
      expect(await keysOf(uploadId)).toEqual([]);
    }
  });

  it("is gone: a one-request upload whose request began 8 days ago (it died) is not described or listed, and is deleted", async () => {
    const before = await idsInBucket();
    const { uploads, holding, release } = uploadsAgo(8);
    const sending = uploads.receive(new Response("id\n1\n").body!, { format: "csv", declaredBytes: 5 }).catch((error: unknown) => error);
    await holding;
    const [uploadId] = (await idsInBucket()).filter((id) => !before.includes(id));
    expect(await keysOf(uploadId!)).toContain(`dev/${uploadId}/data`);

    expect((await apiJson(`/v1/uploads/${uploadId}`)).status).toBe(404);
    expect(await keysOf(uploadId!), "deleted once found").toEqual([]);
    expect((await listed()).map((u) => u.uploadId)).not.toContain(uploadId);
    expect((await apiJson(`/v1/uploads/${uploadId}`, { method: "DELETE" })).status).toBe(404);
    release();
    expect(await sending).toMatchObject({ code: "upload_not_found" });
    expect(await keysOf(uploadId!)).toEqual([]);
  });
});

describe("GET /v1/uploads order", () => {
  it("lists uploads newest first, ids still unguessable (80 random bits after the time)", async () => {
    let now = Date.parse("2026-12-01T10:00:00.000Z");
    const uploads = new Uploads({ bucket: env.UPLOADS, org: "order-org", now: () => now });
    const made: string[] = [];
    for (const file of ["id\n1\n", "id\n2\n", "id\n3\n"]) {
      made.push((await uploads.receive(new Response(file).body!, { format: "csv", declaredBytes: file.length })).uploadId);
      now += 1;
    }
    made.push((await uploads.startMultipart("csv")).uploadId);
    const page = await uploads.list({ limit: 100, after: null });
    expect(page.uploads.map((u) => u.uploadId)).toEqual([...made].reverse());
    for (const uploadId of made) expect(uploadId).toMatch(/^up_[0-9a-f]{32}$/);
    // Two made in the same millisecond share the time, and nothing else.
    const twins = [(await uploads.startMultipart("csv")).uploadId, (await uploads.startMultipart("csv")).uploadId];
    expect(twins[0]!.slice(0, 15)).toBe(twins[1]!.slice(0, 15));
    expect(twins[0]!.slice(15)).not.toBe(twins[1]!.slice(15));

    // Over HTTP, three uploads made one after another come newest first.
    const sent: string[] = [];
    for (const file of ["id\n4\n", "id\n5\n", "id\n6\n"]) {
      const { body } = await apiJson("/v1/uploads", { method: "POST", body: file, headers: { "Content-Type": CSV } });
      sent.push(body.uploadId);
      // The next one made in a later millisecond (the Worker's clock moves on with I/O).
      await until(
        async () => Date.now(),
        (now) => now > Date.parse(body.createdAt),
        "the clock to move on",
      );
    }
    expect((await listed()).map((u) => u.uploadId).filter((id) => sent.includes(id))).toEqual([...sent].reverse());
  });
});
