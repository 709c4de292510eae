/** `troupe/client` against a real local server: the calls the CLI and the dashboard make. */
import { createHash } from "node:crypto";
import { inspect } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  isTransient,
  TroupeApiError,
  TroupeClient,
  type LedgerEvent,
  type LiveMessage,
  type RunView,
  type UploadView,
} from "troupe/client";
import { localServer, until } from "./helpers.ts";

const PORT = 8812;
let server: Awaited<ReturnType<typeof localServer>>;
let client: TroupeClient;

beforeAll(async () => {
  server = await localServer(PORT);
  client = new TroupeClient({ baseUrl: server.baseUrl, token: "dev-token" });
});
afterAll(async () => {
  await server?.stop();
});

const rows = [
  { id: "1", name: "Ada Lovelace", domain: "example.com" },
  { id: "2", name: "!fail Bob", domain: "example.com" },
  { id: "3", name: "Grace Hopper", domain: "navy.mil" },
  { id: "4", name: "Alan Turing", domain: "bletchley.uk" },
  { id: "5", name: "Katherine Johnson", domain: "nasa.gov" },
];

const ended = (run: RunView) => run.status === "completed" || run.status === "failed" || run.status === "cancelled";
const untilEnded = (runId: string) => until(() => client.get(runId), ended, { what: `run ${runId} ending` });
const untilStatus = (runId: string, status: string) =>
  until(
    () => client.get(runId),
    (r) => r.status === status,
    { what: `run ${runId} ${status}` },
  );

describe("TroupeClient", () => {
  it("submits once per idempotency key, reads the run and lists it, and pages its rows in input order", async () => {
    const key = `client-submit-${Date.now()}`;
    const started = await client.submit({ play: "demo-enrich", input: { rows } }, { idempotencyKey: key });
    expect(started.runId).toMatch(/^run_[0-9a-f]{32}$/);
    expect(started.links.self).toBe(`/v1/runs/${started.runId}`);
    expect((await client.submit({ play: "demo-enrich", input: { rows } }, { idempotencyKey: key })).runId).toBe(started.runId);

    const run = await untilEnded(started.runId);
    expect(run).toMatchObject({ runId: started.runId, play: "demo-enrich", status: "completed", result: { rows: 4, failed: 1 } });
    expect(run.progress.maps.leads).toMatchObject({ total: 5, completed: 4, failed: 1 });

    const { runs } = await client.list({ limit: 10 });
    expect(runs.find((r) => r.runId === started.runId)).toMatchObject({ play: "demo-enrich", status: "completed", parentRunId: null });

    const read: Record<string, unknown>[] = [];
    for await (const row of client.rows(started.runId, "leads", { pageSize: 2 })) read.push(row);
    expect(read.map((r) => r._key)).toEqual(["1", "2", "3", "4", "5"]);
    expect(read[0]).toMatchObject({ name: "Ada Lovelace", email: "ada.lovelace@example.com", _status: "completed", _error: null });
    expect(read[1]).toMatchObject({ _status: "failed" });
    expect(read[1]!._error).toEqual(expect.stringContaining("person_not_found"));
  });

  it("reruns an ended run, reusing its rows", async () => {
    const { runId } = await client.submit({ play: "demo-enrich", input: { rows: rows.slice(0, 2) } });
    await untilEnded(runId);
    const rerun = await client.rerun(runId);
    expect(rerun).toMatchObject({ rerunOf: runId, status: expect.any(String) });
    expect(rerun.runId).not.toBe(runId);
    expect(await untilEnded(rerun.runId)).toMatchObject({ status: "completed", result: { rows: 1, failed: 1 } });
  });

  it("pages the run list by cursor (the runs of the tests above)", async () => {
    const first = await client.list({ limit: 1 });
    expect(first.runs).toHaveLength(1);
    expect(first.nextCursor).toEqual(expect.any(String));
    const second = await client.list({ limit: 1, cursor: first.nextCursor! });
    expect(second.runs[0]!.runId).not.toBe(first.runs[0]!.runId);
  });

  it("signals a waiting demo-approval run once per idempotency key, and it completes with the data", async () => {
    const { runId } = await client.submit({ play: "demo-approval", input: { message: "ship it?" } });
    await untilStatus(runId, "waiting");
    const key = `approve-${runId}`;
    expect(await client.signal(runId, "approve", { ok: true }, { idempotencyKey: key })).toMatchObject({
      consumed: true,
      duplicate: false,
    });
    expect(await client.signal(runId, "approve", { ok: true }, { idempotencyKey: key })).toMatchObject({ duplicate: true });
    expect(await untilEnded(runId)).toMatchObject({ status: "completed", result: { approved: { ok: true } } });
  });

  it("cancels a run", async () => {
    const { runId } = await client.submit({ play: "demo-approval", input: { message: "never approved" } });
    await untilStatus(runId, "waiting");
    const answer = await client.cancel(runId);
    expect(answer.runId).toBe(runId);
    expect((await untilEnded(runId)).status).toBe("cancelled");
  });

  it("throws TroupeApiError with the API's status, code and details", async () => {
    const missing = await client.get("run_0123456789abcdef0123456789abcdef").catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(TroupeApiError);
    expect(missing).toMatchObject({ status: 404, code: "run_not_found" });

    const unknownPlay = await client.submit({ play: "no-such-play", input: {} }).catch((e: unknown) => e);
    expect(unknownPlay).toMatchObject({ status: 404, code: "unknown_play" });

    const invalid = (await client
      .submit({ play: "demo-enrich", input: { rows: [{ id: "1" }] } })
      .catch((e: unknown) => e)) as TroupeApiError;
    expect(invalid).toMatchObject({ status: 400, code: "invalid_request" });
    expect(invalid.details).toEqual(expect.arrayContaining([expect.objectContaining({ path: expect.stringContaining("input") })]));

    const badToken = await new TroupeClient({ baseUrl: server.baseUrl, token: "wrong-token" }).list().catch((e: unknown) => e);
    expect(badToken).toMatchObject({ status: 401, code: "unauthorized" });

    // A port of this machine nothing listens on (the node tests use 8811 to 8813 one file at a time).
    const unreachable = await new TroupeClient({ baseUrl: "http://127.0.0.1:8819" }).list().catch((e: unknown) => e);
    expect(unreachable).toMatchObject({ status: 0, code: "unreachable", message: expect.stringContaining("ECONNREFUSED") });

    // A token fetch cannot send (a newline in it): never quoted, in the error or anything it holds.
    const unsendable = await new TroupeClient({ baseUrl: server.baseUrl, token: "secretTOKEN123\nxyz" }).list().catch((e: unknown) => e);
    expect(unsendable).toMatchObject({ status: 0, code: "invalid_request" });
    expect(inspect(unsendable, { depth: 10 })).not.toContain("secretTOKEN123");
  });

  it("says unreachable when a browser's fetch cannot reach the server, whose error names no cause", async () => {
    for (const message of ["Failed to fetch", "Load failed", "NetworkError when attempting to fetch resource."]) {
      const browserLike = new TroupeClient({
        baseUrl: "http://troupe.test",
        token: "t0ken",
        fetch: async () => {
          throw new TypeError(message);
        },
      });
      const error = await browserLike.list().catch((e: unknown) => e);
      expect(error).toMatchObject({ status: 0, code: "unreachable", message: expect.stringContaining(message) });
      expect(isTransient(error)).toBe(true);
    }
  });

  it("upload sends the file as it is, typed by its format", async () => {
    const sent: { url: string; method: string; headers: Headers; body: string; duplex?: string }[] = [];
    const recording = new TroupeClient({
      baseUrl: "http://troupe.test/",
      token: "t0ken",
      fetch: async (url, init) => {
        sent.push({
          url: String(url),
          method: init!.method!,
          headers: new Headers(init!.headers),
          body: await new Response(init!.body).text(),
          duplex: (init as { duplex?: string }).duplex,
        });
        return Response.json({ uploadId: "up_1", rows: 1, bytes: 8, columns: ["a", "b"], format: "csv" }, { status: 201 });
      },
    });
    expect(await recording.upload("a,b\n1,2\n", { format: "csv" })).toMatchObject({ uploadId: "up_1", rows: 1 });
    const stream = new Blob(['{"a":1}\n']).stream();
    await recording.upload(stream, { format: "ndjson" });
    expect(sent.map((r) => [r.url, r.method, r.headers.get("content-type"), r.headers.get("authorization"), r.body, r.duplex])).toEqual([
      ["http://troupe.test/v1/uploads", "POST", "text/csv", "Bearer t0ken", "a,b\n1,2\n", undefined],
      ["http://troupe.test/v1/uploads", "POST", "application/x-ndjson", "Bearer t0ken", '{"a":1}\n', "half"],
    ]);
  });

  it("uploads a file whole (with a length or streamed) or in parts, and reads back what the server made of it", async () => {
    const csv = 'id,name\n1,"Ada\nLovelace"\n2,Grace Hopper\n';
    const whole = await client.upload(new Blob([csv]), { format: "csv" });
    expect(whole).toEqual({
      uploadId: expect.stringMatching(/^up_[0-9a-f]{32}$/),
      rows: 2,
      bytes: csv.length,
      columns: ["id", "name"],
      format: "csv",
      sha256: createHash("sha256").update(csv).digest("hex"),
      status: "ready",
      createdAt: expect.any(String),
    });
    expect(await client.getUpload(whole.uploadId)).toEqual(whole);
    // Node's fetch sends a stream without a Content-Length.
    const streamed = await client.upload(new Blob(['{"a":1}\n', '{"b":2}\n']).stream(), { format: "ndjson" });
    expect(streamed).toMatchObject({ rows: 2, columns: ["a", "b"], format: "ndjson" });

    const { uploadId } = await client.startMultipartUpload({ format: "csv" });
    expect(await client.getUpload(uploadId)).toMatchObject({ uploadId, status: "receiving", format: "csv" });
    expect(await client.uploadPart(uploadId, 1, csv)).toEqual({ part: 1, bytes: csv.length });
    expect(await client.completeUpload(uploadId)).toMatchObject({ uploadId, rows: 2, status: "ready" });
    expect(await client.deleteUpload(uploadId)).toEqual({ uploadId, deleted: true });
    expect(await client.getUpload(uploadId).catch((e: unknown) => e)).toMatchObject({ status: 404, code: "upload_not_found" });

    const malformed = await client.upload("a,b\n1\n", { format: "csv" }).catch((e: unknown) => e);
    expect(malformed).toMatchObject({ status: 400, code: "malformed_upload", message: expect.stringContaining("line 2") });
  });

  it("lists the org's uploads by cursor, ready and receiving, each as getUpload describes it", async () => {
    const ready = await client.upload("id\n1\n", { format: "csv" });
    const { uploadId: receiving } = await client.startMultipartUpload({ format: "ndjson" });
    const listed: UploadView[] = [];
    let requests = 0;
    for (let cursor: string | undefined; ; ) {
      const page = await client.listUploads({ limit: 1, cursor });
      requests++;
      listed.push(...page.uploads);
      if (page.nextCursor === null) break;
      cursor = page.nextCursor;
    }
    expect(requests).toBeGreaterThanOrEqual(2);
    expect(new Set(listed.map((u) => u.uploadId)).size).toBe(listed.length);
    expect(listed.find((u) => u.uploadId === ready.uploadId)).toEqual(ready);
    expect(listed.find((u) => u.uploadId === receiving)).toEqual(await client.getUpload(receiving));
    expect((await client.listUploads()).uploads.map((u) => u.uploadId)).toEqual(listed.map((u) => u.uploadId));
    expect(await client.listUploads({ cursor: "nonsense" }).catch((e: unknown) => e)).toMatchObject({
      status: 400,
      code: "invalid_request",
    });
  });

  it("events: the snapshot, then every event once and in order, to the run's end", async () => {
    const { runId } = await client.submit({ play: "demo-enrich", input: { rows } });
    const messages: LiveMessage[] = [];
    for await (const message of client.events(runId)) messages.push(message);
    expect(messages[0]!.type).toBe("snapshot");
    const events = messages.filter((m): m is LedgerEvent => m.type !== "snapshot");
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.at(-1)!.type).toBe("run.completed");
    expect(events.some((e) => e.type === "map.progress" && e.map === "leads")).toBe(true);
    const ledger = await client.eventPage(runId, { limit: 1000 });
    expect(events.map((e) => [e.seq, e.type])).toEqual(
      ledger.events.filter((e) => e.seq <= events.at(-1)!.seq).map((e) => [e.seq, e.type]),
    );

    // Watching an ended run from its terminal event on: the snapshot, then the end of the iteration.
    const late: LiveMessage[] = [];
    for await (const message of client.events(runId, { after: events.at(-1)!.seq })) late.push(message);
    expect(late.map((m) => m.type)).toEqual(["snapshot"]);
  });

  it("events: pings a waiting run's socket, which the server answers with pongs that never surface, on one socket to the end", async () => {
    const sockets: WebSocket[] = [];
    let pongs = 0;
    let ponged: () => void = () => undefined;
    const firstPong = new Promise<void>((resolve) => (ponged = resolve));
    // The global WebSocket, counting the pongs its sockets receive.
    class PongCountingWebSocket extends WebSocket {
      constructor(url: string | URL, protocols?: string | string[]) {
        super(url, protocols);
        sockets.push(this);
        this.addEventListener("message", (event) => {
          if (event.data !== "pong") return;
          pongs++;
          ponged();
        });
      }
    }
    const watcher = new TroupeClient({ baseUrl: server.baseUrl, WebSocket: PongCountingWebSocket });
    const { runId } = await client.submit({ play: "demo-approval", input: { message: "approve me once the watcher has a pong" } });

    const messages: LiveMessage[] = [];
    for await (const message of watcher.events(runId, { heartbeatSeconds: 0.5 })) {
      messages.push(message);
      if (message.type === "wait.started") {
        // The run is idle and its coordinator may hibernate: only the heartbeat keeps the socket from going silent.
        await firstPong;
        expect((await client.signal(runId, "approve", "yes")).consumed).toBe(true);
      }
    }

    expect(pongs).toBeGreaterThan(0);
    // Answered in time, every time: the socket was never taken for dead and reopened.
    expect(sockets).toHaveLength(1);
    expect(messages.filter((m) => m.type === "snapshot")).toHaveLength(1);
    const events = messages.filter((m): m is LedgerEvent => m.type !== "snapshot");
    const ledger = await client.eventPage(runId, { limit: 1000 });
    expect(events.map((e) => [e.seq, e.type])).toEqual(
      ledger.events.filter((e) => e.seq <= events.at(-1)!.seq).map((e) => [e.seq, e.type]),
    );
    expect(events.at(-1)!.type).toBe("run.completed");
  });

  it("events: a dropped socket is reopened with ?after=<last seq>, and nothing is missed or repeated", async () => {
    const sockets: WebSocket[] = [];
    const urls: string[] = [];
    // The global WebSocket, recording each socket so that the test can drop one.
    class RecordingWebSocket extends WebSocket {
      constructor(url: string | URL, protocols?: string | string[]) {
        super(url, protocols);
        sockets.push(this);
        urls.push(String(url));
      }
    }
    const watcher = new TroupeClient({ baseUrl: server.baseUrl, WebSocket: RecordingWebSocket });
    const { runId } = await client.submit({ play: "demo-approval", input: { message: "approve me while the watcher is away" } });

    const messages: LiveMessage[] = [];
    let droppedAfter = 0;
    for await (const message of watcher.events(runId)) {
      messages.push(message);
      if (message.type === "wait.started" && !droppedAfter) {
        // The run waits for the signal: drop the socket, then let the run go on to its end while nobody listens.
        droppedAfter = (message as LedgerEvent).seq;
        // With a code: the server answers a close without one (1005) with silence, and the socket would linger 10 s.
        sockets[0]!.close(1000);
        expect((await client.signal(runId, "approve", "yes")).consumed).toBe(true);
        await untilEnded(runId);
      }
    }

    expect(droppedAfter).toBeGreaterThan(0);
    expect(sockets.length).toBe(2);
    expect(new URL(urls[1]!).searchParams.get("after")).toBe(String(droppedAfter));
    expect(messages.filter((m) => m.type === "snapshot")).toHaveLength(2);
    const events = messages.filter((m): m is LedgerEvent => m.type !== "snapshot");
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    const ledger = await client.eventPage(runId, { limit: 1000 });
    const last = events.at(-1)!;
    expect(last.type).toBe("run.completed");
    expect(events.map((e) => [e.seq, e.type])).toEqual(ledger.events.filter((e) => e.seq <= last.seq).map((e) => [e.seq, e.type]));
    expect(events.map((e) => e.type)).toEqual(
      expect.arrayContaining(["wait.started", "signal.received", "wait.finished", "run.completed"]),
    );
  });
});
