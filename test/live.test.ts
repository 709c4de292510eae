import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { TURN_EVENTS } from "../src/runtime/views/live-feed";
import { allEvents, api, apiJson, chunkCompletions, eventsOfType, simReset, simStats, startRun, TOKEN, waitForRun } from "./helpers";

interface Live {
  status: number;
  ws: WebSocket;
  /** Every JSON message, in order. */
  messages: any[];
  /** Every text frame as sent, JSON or not ("pong"). */
  frames: string[];
  closed: Promise<{ code: number; reason: string }>;
}

/** Opens `GET /v1/runs/<id>/live` the way a client would, and collects every message. */
async function openLive(
  runId: string,
  options: { after?: number; token?: string | null; queryToken?: string; headers?: Record<string, string> } = {},
): Promise<Live> {
  const url = new URL(`http://troupe.test/v1/runs/${runId}/live`);
  if (options.after !== undefined) url.searchParams.set("after", String(options.after));
  const headers = new Headers({ Upgrade: "websocket", ...options.headers });
  if (options.queryToken) url.searchParams.set("token", options.queryToken);
  const token = options.token === undefined ? TOKEN : options.token;
  if (token && !options.queryToken) headers.set("Authorization", `Bearer ${token}`);
  const res = await exports.default.fetch(new Request(url, { headers }));
  if (res.status !== 101) throw Object.assign(new Error(`live: ${res.status}`), { status: res.status, body: await res.json() });
  const ws = res.webSocket!;
  const messages: any[] = [];
  const frames: string[] = [];
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.addEventListener("close", (e) => resolve({ code: e.code, reason: e.reason })),
  );
  ws.addEventListener("message", (e) => {
    frames.push(e.data as string);
    if (e.data !== "pong") messages.push(JSON.parse(e.data as string));
  });
  ws.accept();
  return { status: res.status, ws, messages, frames, closed };
}

async function refused(runId: string, options: Parameters<typeof openLive>[1]): Promise<{ status: number; body: any }> {
  try {
    await openLive(runId, options);
  } catch (error) {
    return error as { status: number; body: any };
  }
  throw new Error("the socket opened");
}

async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function seqs(messages: any[]): number[] {
  return messages.filter((m) => m.type !== "snapshot").map((m) => m.seq);
}

const rowsOf = (prefix: string, count: number) =>
  Array.from({ length: count }, (_, i) => ({ id: `${prefix}${i}`, name: `Live ${prefix} ${i}`, domain: "live.test" }));

async function withLatency<T>(latencyMs: number, fn: () => Promise<T>): Promise<T> {
  await api("/v1/sim/config", { method: "PUT", json: { latencyMs } });
  try {
    return await fn();
  } finally {
    await api("/v1/sim/config", { method: "PUT", json: { latencyMs: 0 } });
  }
}

describe("GET /v1/runs/<id>/live", () => {
  it("sends a snapshot, then every ledger event in seq order without gaps, through the terminal event", async () => {
    await withLatency(10, async () => {
      const runId = await startRun("test-map", { rows: rowsOf("a", 300) });
      const live = await openLive(runId, { queryToken: TOKEN });
      const close = await live.closed;
      expect(close.code).toBe(1000);

      const [snapshot, ...events] = live.messages;
      expect(snapshot).toMatchObject({
        type: "snapshot",
        seq: expect.any(Number),
        run: { runId, play: "test-map", org: "dev", status: expect.any(String) },
      });
      expect(seqs(live.messages)).toEqual(events.map((_, i) => i + 1));
      expect(events).toEqual(await allEvents(runId));
      expect(events[0].type).toBe("run.started");
      expect(events.at(-1)).toMatchObject({ type: "run.completed", result: { total: 300, completed: 300 } });
      const progress = events.filter((e) => e.type === "map.progress");
      expect(progress.length).toBeGreaterThan(0);
      expect(progress.at(-1)).toMatchObject({
        map: "items",
        total: 300,
        completed: 300,
        failed: 0,
        active: 0,
        waiting: 0,
        blocked: 0,
        rowsPerSecond: expect.any(Number),
      });
      for (const p of progress)
        expect(Object.keys(p)).toEqual(
          expect.arrayContaining(["total", "completed", "failed", "active", "waiting", "blocked", "rowsPerSecond", "etaSeconds"]),
        );
      expect(
        chunkCompletions(events)
          .map((c) => c.chunk)
          .sort((a, b) => a - b),
      ).toEqual([0, 1, 2, 3, 4, 5]);
    });
  });

  it("carries chunk completions a few events a second at most, each chunk once, on a first run and on its rerun's sweeps", async () => {
    await simReset();
    const rows = rowsOf("coalesced", 400);
    const runs = [];
    for (let i = 0; i < 2; i++) {
      const run = await waitForRun(await startRun("test-map", { rows }, { testPolicy: { chunkRows: 10 } }));
      expect(run.status).toBe("completed");
      runs.push(run.runId);
    }
    for (const [i, runId] of runs.entries()) {
      const events = await allEvents(runId);
      const chunks = chunkCompletions(events);
      expect(chunks.map((c) => c.chunk).sort((a, b) => a - b)).toEqual([...Array(40).keys()]);
      // The rerun computed nothing: every row was reused.
      expect(chunks.reduce((sum, c) => sum + c.reused, 0)).toBe(i === 0 ? 0 : 400);
      // The rerun's 40 chunks are swept a group at a time: a few events, not one a chunk (the pacing itself, one event
      // per progress interval, is map-progress.test.ts's, on a clock of its own).
      if (i === 1) expect(eventsOfType(events, "chunks.completed").length).toBeLessThanOrEqual(5);
    }
    // Each row's one call made once, by the first run.
    expect(await simStats()).toMatchObject({ calls: 400, duplicates: 0 });
  });

  it("takes ?after= past the ledger's end on a waiting run as 'from now': the events that follow still arrive", async () => {
    const key = `late-${Date.now().toString(36)}`;
    const runId = await startRun("test-waits", { keys: [key] });
    await until(async () => (await allEvents(runId)).some((e) => e.type === "wait.started"), "the run to wait");
    const live = await openLive(runId, { after: 10_000 });
    await until(() => live.messages.length > 0, "the snapshot");
    expect(live.messages[0]).toMatchObject({ type: "snapshot", run: { status: "waiting" } });
    expect((await apiJson(`/v1/runs/${runId}/signals/${key}`, { method: "POST", json: { data: 1 } })).status).toBe(202);
    const close = await live.closed;
    expect(close.code).toBe(1000);
    const types = live.messages.slice(1).map((m) => m.type);
    expect(types).toContain("signal.received");
    expect(types.at(-1)).toBe("run.completed");
  });

  it("replays a ledger longer than one turn sends, on a waiting run and on the run once ended: every event once, in order", async () => {
    const key = `long-${Date.now().toString(36)}`;
    const runId = await startRun("test-waits", { keys: [key], logLines: TURN_EVENTS + 500 });
    await until(async () => (await allEvents(runId)).some((e) => e.type === "wait.started"), "the run to wait");
    const live = await openLive(runId);
    await until(() => live.messages.length > 0, "the snapshot");
    const { seq } = live.messages[0];
    expect(seq).toBeGreaterThan(TURN_EVENTS + 500);
    await until(() => live.messages.length > seq, "the replay");
    expect((await apiJson(`/v1/runs/${runId}/signals/${key}`, { method: "POST", json: { data: 1 } })).status).toBe(202);
    expect((await live.closed).code).toBe(1000);
    const sent = seqs(live.messages);
    expect(sent).toEqual(sent.map((_, i) => i + 1));
    expect(live.messages.at(-1).type).toBe("run.completed");
    // Ended: replayed on a plain socket, which closes once the run's end is sent.
    const ended = await openLive(runId);
    expect((await ended.closed).code).toBe(1000);
    expect(seqs(ended.messages)).toEqual(sent);
  });

  it('answers a watcher\'s "ping" with "pong" while the run waits, and the events go on unchanged', async () => {
    const key = `ping-${Date.now().toString(36)}`;
    const runId = await startRun("test-waits", { keys: [key] });
    await until(async () => (await allEvents(runId)).some((e) => e.type === "wait.started"), "the run to wait");
    const live = await openLive(runId);
    await until(() => live.messages.length > 0, "the snapshot");
    live.ws.send("ping");
    await until(() => live.frames.includes("pong"), "the pong");
    expect((await apiJson(`/v1/runs/${runId}/signals/${key}`, { method: "POST", json: { data: 1 } })).status).toBe(202);
    expect((await live.closed).code).toBe(1000);
    // One pong for the one ping; every other frame is the snapshot or a ledger event, each once, in order.
    expect(live.frames.filter((f) => f === "pong")).toHaveLength(1);
    expect(live.messages).toHaveLength(live.frames.length - 1);
    const [snapshot, ...events] = live.messages;
    expect(snapshot).toMatchObject({ type: "snapshot", run: { runId, status: "waiting" } });
    expect(events).toEqual(await allEvents(runId));
    expect(events.at(-1)).toMatchObject({ type: "run.completed" });
  });

  it("never sends the same map counts twice in a row", async () => {
    const runId = await startRun("test-map", { rows: rowsOf("dup", 300) });
    await waitForRun(runId);
    const progress = (await allEvents(runId)).filter((e) => e.type === "map.progress");
    const counts = progress.map(({ total, completed, failed, active, waiting, blocked, inFlight, executors }) =>
      JSON.stringify({ total, completed, failed, active, waiting, blocked, inFlight, executors }),
    );
    for (const [i, c] of counts.slice(1).entries()) expect(c, `map.progress ${i + 1} repeats ${i}`).not.toBe(counts[i]);
  });

  it("matches the snapshot to GET /v1/runs/<id> for a finished run, replays its ledger and closes", async () => {
    const runId = await startRun("test-map", { rows: rowsOf("b", 3) });
    const run = await waitForRun(runId);
    const live = await openLive(runId);
    await live.closed;
    const [snapshot, ...events] = live.messages;
    const ledger = await allEvents(runId);
    expect(snapshot).toEqual({ type: "snapshot", run, seq: ledger.at(-1)!.seq });
    expect(events).toEqual(ledger);

    const tail = await openLive(runId, { after: ledger.at(-2)!.seq });
    await tail.closed;
    expect(tail.messages.slice(1)).toEqual([ledger.at(-1)]);
  });

  it("lets a client that reconnects with ?after= see every event exactly once across both connections", async () => {
    await withLatency(25, async () => {
      const runId = await startRun("test-map", { rows: rowsOf("c", 400) });
      const first = await openLive(runId);
      await until(() => first.messages.some((m) => m.type === "chunks.completed"), "a first chunk");
      first.ws.close(1000, "going away");
      await first.closed;
      const seen = seqs(first.messages);
      const lastSeen = seen.at(-1)!;
      // Let the run go on without a watcher, so the second connection has something to replay.
      await until(async () => (await allEvents(runId)).length > lastSeen + 2, "events while disconnected");

      const second = await openLive(runId, { after: lastSeen });
      await second.closed;
      expect(second.messages[0].type).toBe("snapshot");
      const all = [...first.messages.slice(1), ...second.messages.slice(1)];
      const ledger = await allEvents(runId);
      expect(all).toEqual(ledger);
      expect(seqs(all)).toEqual(ledger.map((_, i) => i + 1));
      expect(ledger.at(-1)!.type).toBe("run.completed");
    });
  });

  it("refuses a bad token with 401 and another org's run with 404, before the upgrade", async () => {
    const runId = await startRun("test-map", { rows: rowsOf("d", 2) });
    for (const options of [{ token: null }, { token: "nope" }, { queryToken: "nope" }]) {
      const { status, body } = await refused(runId, options);
      expect(status, JSON.stringify(options)).toBe(401);
      expect(body.error.code).toBe("unauthorized");
    }
    for (const options of [{ token: "other-token" }, { queryToken: "other-token" }]) {
      const { status, body } = await refused(runId, options);
      expect(status, JSON.stringify(options)).toBe(404);
      expect(body.error.code).toBe("run_not_found");
    }
    expect((await refused("run_0123456789abcdef0123456789abcdef", {})).status).toBe(404);
    expect((await refused(runId, { after: -1 })).status).toBe(400);
    // The query token is for the live route only.
    expect((await apiJson(`/v1/runs/${runId}?token=${TOKEN}`, { token: null })).status).toBe(401);
    // Without an upgrade the route answers 426, not a socket.
    const plain = await apiJson(`/v1/runs/${runId}/live`);
    expect(plain.status).toBe(426);
    expect(plain.body.error.code).toBe("upgrade_required");
    await waitForRun(runId);
  });

  it("takes no socket props or room from a client's headers, and an upgrade however it is spelt", async () => {
    const runId = await startRun("test-map", { rows: rowsOf("h", 2) });
    // partyserver reads its props from `x-partykit-props` (this one is not base64: it threw, a 500 with a stack).
    const live = await openLive(runId, { headers: { Upgrade: "WebSocket", "X-Partykit-Props": "%", "X-Partykit-Room": "another-run" } });
    await live.closed;
    expect(live.messages[0]).toMatchObject({ type: "snapshot", run: { runId } });
    expect(live.messages.at(-1)).toMatchObject({ type: "run.completed" });
  });

  it("redacts a credential a play logs, in the ledger and on the socket", async () => {
    const secret = (env as unknown as Record<string, string>).SIM_API_KEY;
    expect(secret).toBeTruthy();
    const runId = await startRun("test-map", { rows: rowsOf("e", 1), log: `calling with ${secret} and Authorization: Bearer abc.def-123` });
    const live = await openLive(runId);
    await live.closed;
    const expected = 'calling with [REDACTED] and Authorization: Bearer [REDACTED] {"rows":1}';
    expect(live.messages.filter((m) => m.type === "log.appended").map((m) => m.line)).toContain(expected);
    const ledger = (await allEvents(runId)).filter((e) => e.type === "log.appended").map((e) => e.line);
    expect(ledger).toContain(expected);
    expect(JSON.stringify(await allEvents(runId))).not.toContain(secret);
  });

  it("redacts a credential quoted by a run's failure, in GET /v1/runs/<id>, the snapshot and the run.failed event", async () => {
    const secret = (env as unknown as Record<string, string>).SIM_API_KEY;
    const runId = await startRun("test-map", {
      rows: [{ id: "f1", name: `Key ${secret}`, domain: "live.test", throw: true }],
      onRowError: "fail",
    });
    const run = await waitForRun(runId);
    expect(run.status).toBe("failed");
    expect(run.error.message).toContain("boom for Key [REDACTED]");
    const live = await openLive(runId);
    await live.closed;
    expect(live.messages[0].run.error).toEqual(run.error);
    expect(live.messages.at(-1)).toMatchObject({ type: "run.failed", error: run.error });
    expect(JSON.stringify(live.messages)).not.toContain(secret);
  });
});
