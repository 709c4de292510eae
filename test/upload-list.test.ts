/**
 * `GET /v1/uploads`: the org's uploads, ready or receiving parts, a page at a time, over the real HTTP API and
 * R2 binding (miniflare's). The bucket is this file's alone, but each test adds to it: assertions name the uploads a
 * test made, and completeness is checked by paging to the end.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { UploadList, UploadView } from "../src/api/responses";
import { Uploads } from "../src/uploads/uploads";
import { apiJson } from "./helpers";

const CSV = "text/csv";
const NDJSON = "application/x-ndjson";

async function readyUpload(file: string, contentType: string, token?: string): Promise<UploadView> {
  const { status, body } = await apiJson("/v1/uploads", { method: "POST", body: file, token, headers: { "Content-Type": contentType } });
  expect(status).toBe(201);
  return body;
}

/** A multipart upload still receiving parts (with `part` sent, its first part). */
async function receivingUpload(options: { part?: string } = {}): Promise<string> {
  const { status, body } = await apiJson("/v1/uploads?multipart=1", { method: "POST", headers: { "Content-Type": CSV } });
  expect(status).toBe(201);
  if (options.part !== undefined) {
    expect((await apiJson(`/v1/uploads/${body.uploadId}/parts/1`, { method: "PUT", body: options.part })).status).toBe(200);
  }
  return body.uploadId;
}

/** Every page of the listing, `limit` at a time, followed by its `nextCursor` to the end. */
async function allPages(limit: number, token?: string): Promise<UploadList[]> {
  const pages: UploadList[] = [];
  for (let cursor: string | null = null; ; ) {
    const query: string = `limit=${limit}${cursor ? `&cursor=${cursor}` : ""}`;
    const { status, body } = await apiJson<UploadList>(`/v1/uploads?${query}`, { token });
    expect(status, JSON.stringify(body)).toBe(200);
    expect(body.uploads.length).toBeLessThanOrEqual(limit);
    pages.push(body);
    if (body.nextCursor === null) return pages;
    expect(pages.length, "the listing ends").toBeLessThan(100);
    cursor = body.nextCursor;
  }
}

const idsOf = (pages: UploadList[]) => pages.flatMap((p) => p.uploads.map((u) => u.uploadId));

describe("GET /v1/uploads", () => {
  it("lists every upload of the org once across pages, ready or receiving, each as GET describes it", async () => {
    const ready = [
      await readyUpload("id,name\n1,Ada\n", CSV),
      await readyUpload("id,name\n1,Ada\n2,Grace\n", CSV),
      await readyUpload('{"id":1}\n{"id":2}\n{"id":3}\n', NDJSON),
      await readyUpload("a\n", CSV),
    ];
    const receiving = [await receivingUpload(), await receivingUpload({ part: "id,name\n1,Ada\n" })];
    const elsewhere = await readyUpload("id\n9\n", CSV, "other-token");
    const mine = [...ready.map((u) => u.uploadId), ...receiving];

    const pages = await allPages(2);
    const listed = idsOf(pages);
    expect(pages.length).toBeGreaterThanOrEqual(3);
    expect(new Set(listed).size, "each upload once").toBe(listed.length);
    expect(listed.filter((id) => mine.includes(id)).sort()).toEqual([...mine].sort());
    expect(listed, "in upload-id order").toEqual([...listed].sort());
    expect(listed).not.toContain(elsewhere.uploadId);
    expect(pages.at(-1)!.nextCursor).toBeNull();
    for (const page of pages.slice(0, -1)) expect(page.nextCursor).toBe(page.uploads.at(-1)!.uploadId);

    const byId = new Map(pages.flatMap((p) => p.uploads).map((u) => [u.uploadId, u]));
    for (const uploadId of mine) {
      const described = await apiJson(`/v1/uploads/${uploadId}`);
      expect(described.status).toBe(200);
      expect(byId.get(uploadId), uploadId).toEqual(described.body);
    }
    for (const upload of ready) expect(byId.get(upload.uploadId)).toEqual(upload);
    for (const uploadId of receiving)
      expect(byId.get(uploadId)).toEqual({ uploadId, status: "receiving", format: "csv", createdAt: expect.any(String) });

    // The other org lists its own upload, and none of these.
    const theirs = idsOf(await allPages(50, "other-token"));
    expect(theirs).toContain(elsewhere.uploadId);
    expect(theirs.filter((id) => mine.includes(id))).toEqual([]);

    // The default page holds them all here (50).
    const { body: whole } = await apiJson<UploadList>("/v1/uploads");
    expect(whole.uploads.map((u) => u.uploadId)).toEqual(listed);
    expect(whole.nextCursor).toBeNull();
  });

  it("no longer lists a deleted upload, ready or receiving", async () => {
    const ready = await readyUpload("id\n1\n", CSV);
    const receiving = await receivingUpload({ part: "id\n1\n" });
    const kept = await readyUpload("id\n2\n", CSV);
    expect(idsOf(await allPages(1))).toEqual(expect.arrayContaining([ready.uploadId, receiving, kept.uploadId]));
    for (const uploadId of [ready.uploadId, receiving])
      expect((await apiJson(`/v1/uploads/${uploadId}`, { method: "DELETE" })).status).toBe(200);
    const listed = idsOf(await allPages(1));
    expect(listed).toContain(kept.uploadId);
    expect(listed).not.toContain(ready.uploadId);
    expect(listed).not.toContain(receiving);
  });

  it("leaves out a prefix with neither record, and pages on past it: a page of none still gives a cursor", async () => {
    const before = idsOf(await allPages(50));
    // First in key order: an upload's leftovers (no record), and a name that is no upload id at all.
    const stray = `up_${"0".repeat(32)}`;
    await env.UPLOADS.put(`dev/${stray}/data`, "id\n1\n");
    await env.UPLOADS.put("dev/leftover/data", "x");
    // And one last in key order, past every real upload.
    const last = `up_${"f".repeat(32)}`;
    await env.UPLOADS.put(`dev/${last}/parts/1`, "");
    const made = await readyUpload("id\n3\n", CSV);

    const pages = await allPages(1);
    const listed = idsOf(pages);
    expect(listed).not.toContain(stray);
    expect(listed).not.toContain(last);
    expect(listed.sort()).toEqual([...before, made.uploadId].sort());
    // The stray prefix filled the first page alone: it came back empty, and the listing went on.
    expect(pages[0]).toEqual({ uploads: [], nextCursor: stray });
    expect(pages.at(-1)!.nextCursor).toBeNull();
    expect((await apiJson(`/v1/uploads/${stray}`)).status).toBe(404);
  });

  it("refuses a malformed cursor or limit, and an unknown parameter, with 400 invalid_request", async () => {
    for (const query of [
      "cursor=nonsense",
      `cursor=up_${"a".repeat(31)}`,
      `cursor=up_${"A".repeat(32)}`,
      `cursor=run_${"a".repeat(32)}`,
      "cursor=",
      "limit=0",
      "limit=101",
      "limit=1.5",
      "limit=ten",
      "limit=",
      "status=ready",
      "after=up_00000000000000000000000000000000",
    ]) {
      const { status, body } = await apiJson(`/v1/uploads?${query}`);
      expect({ query, status, code: body.error?.code }).toEqual({ query, status: 400, code: "invalid_request" });
    }
    expect((await apiJson("/v1/uploads?limit=100")).status).toBe(200);
    expect((await apiJson(`/v1/uploads?limit=1&cursor=up_${"f".repeat(32)}`)).body).toEqual({ uploads: [], nextCursor: null });
  });

  it("reads at most 6 records at once, and keeps the page in key order", async () => {
    for (let i = 0; i < 8; i++) await readyUpload(`id\n${i}\n`, CSV);
    let inFlight = 0;
    let most = 0;
    // The bucket, with each get held a moment so that reads overlap as far as the listing lets them.
    const bucket = new Proxy(env.UPLOADS, {
      get(target, name) {
        if (name !== "get") return Reflect.get(target, name, target).bind(target);
        return async (...args: Parameters<R2Bucket["get"]>) => {
          most = Math.max(most, ++inFlight);
          try {
            await new Promise((r) => setTimeout(r, 5));
            return await target.get(...args);
          } finally {
            inFlight--;
          }
        };
      },
    });
    const page = await new Uploads({ bucket, org: "dev" }).list({ limit: 100, after: null });
    expect(page.uploads.length).toBeGreaterThanOrEqual(8);
    expect(most).toBe(6);
    expect(page.uploads.map((u) => u.uploadId)).toEqual(idsOf(await allPages(100)));
  });
});
