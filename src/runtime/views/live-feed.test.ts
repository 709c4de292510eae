import { describe, expect, it } from "vitest";
import { LiveFeed, type LiveConnection, type LiveState, TURN_EVENTS } from "./live-feed";
import type { LedgerEvent, LedgerEventType } from "../../stores/ledger-store";
import type { RunView } from "./run-view";

class FakeLedger {
  events: LedgerEvent[] = [];
  status: RunView["status"] = "running";
  /** An event of `type` (its fields do not matter to the feed, which sends events as they are). */
  append(type: LedgerEventType): LedgerEvent {
    const event = { seq: this.events.length + 1, type, at: new Date(0).toISOString() } as LedgerEvent;
    this.events.push(event);
    if (type === "run.completed") this.status = "completed";
    return event;
  }
  feed(): LiveFeed {
    return new LiveFeed({
      events: (after, limit) => this.events.filter((e) => e.seq > after).slice(0, limit),
      snapshot: () => ({ run: { status: this.status } as RunView, seq: this.events.length }),
    });
  }
}

class FakeConnection implements LiveConnection {
  state: LiveState | null = null;
  sent: any[] = [];
  closed: { code?: number; reason?: string } | null = null;
  failSends = false;
  failStateWrites = false;
  stateWrites = 0;
  constructor(readonly id: string) {}
  setState(state: LiveState) {
    if (this.failStateWrites) throw new Error("attachment could not be serialized");
    this.state = state;
    this.stateWrites++;
  }
  send(message: string) {
    if (this.failSends || this.closed) throw new Error("socket closed");
    this.sent.push(JSON.parse(message));
  }
  close(code?: number, reason?: string) {
    if (this.closed) throw new Error("already closed");
    this.closed = { code, reason };
  }
  seqs() {
    return this.sent.filter((m) => m.type !== "snapshot").map((m) => m.seq);
  }
}

describe("LiveFeed", () => {
  it("sends the snapshot, replays the ledger after `after`, then each new event once", () => {
    const ledger = new FakeLedger();
    for (const t of ["run.started", "map.progress", "chunks.completed"] as const) ledger.append(t);
    const feed = ledger.feed();
    const all = new FakeConnection("all");
    const tail = new FakeConnection("tail");
    feed.open(all, 0);
    feed.open(tail, 2);
    expect(all.sent[0]).toEqual({ type: "snapshot", run: { status: "running" }, seq: 3 });
    expect(all.seqs()).toEqual([1, 2, 3]);
    expect(tail.seqs()).toEqual([3]);

    const event = ledger.append("map.progress");
    feed.publish(event, [all, tail]);
    feed.publish(event, [all, tail]);
    expect(all.seqs()).toEqual([1, 2, 3, 4]);
    expect(tail.seqs()).toEqual([3, 4]);
  });

  it("treats a cursor past the ledger's end as the snapshot's position: the next events still arrive", () => {
    const ledger = new FakeLedger();
    ledger.append("run.started");
    const feed = ledger.feed();
    const ahead = new FakeConnection("ahead");
    feed.open(ahead, 50);
    expect(ahead.state).toEqual({ lastSeq: 1 });
    feed.publish(ledger.append("wait.started"), [ahead]);
    expect(ahead.seqs()).toEqual([2]);
  });

  it("catches a connection that fell behind up from the ledger, in order", () => {
    const ledger = new FakeLedger();
    const feed = ledger.feed();
    const conn = new FakeConnection("c");
    feed.open(conn, 0);
    ledger.append("run.started");
    ledger.append("log.appended");
    feed.publish(ledger.append("map.progress"), [conn]);
    expect(conn.seqs()).toEqual([1, 2, 3]);
  });

  it("skips connections that have not been opened", () => {
    const ledger = new FakeLedger();
    const conn = new FakeConnection("c");
    ledger.feed().publish(ledger.append("run.started"), [conn]);
    expect(conn.sent).toEqual([]);
  });

  it("replays a long ledger in pages with one state write per page", () => {
    const ledger = new FakeLedger();
    for (let i = 0; i < 1234; i++) ledger.append("log.appended");
    const conn = new FakeConnection("c");
    ledger.feed().open(conn, 0);
    expect(conn.seqs()).toEqual(ledger.events.map((e) => e.seq));
    expect(conn.state).toEqual({ lastSeq: 1234 });
    expect(conn.stateWrites).toBeLessThanOrEqual(4);
  });

  it("replays a ledger past one turn's events over several turns: every event once, in order, with appends between", async () => {
    const ledger = new FakeLedger();
    for (let i = 0; i < 2.5 * TURN_EVENTS; i++) ledger.append("log.appended");
    const feed = ledger.feed();
    const conn = new FakeConnection("c");
    // Another connection with the same id (a client's `?_pk=`) replays on its own.
    const twin = new FakeConnection("c");
    feed.open(conn, 0);
    feed.open(twin, TURN_EVENTS / 2);
    expect(conn.seqs()).toHaveLength(TURN_EVENTS);
    // An append while the replay is under way: it goes out after the events before it, once.
    feed.publish(ledger.append("run.started"), [conn, twin]);
    expect(conn.seqs()).toHaveLength(2 * TURN_EVENTS);
    while (!conn.closed && conn.seqs().length < ledger.events.length) await new Promise((resolve) => setTimeout(resolve, 0));
    feed.publish(ledger.append("run.completed"), [conn, twin]);
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(conn.seqs()).toEqual(ledger.events.map((e) => e.seq));
    expect(twin.seqs()).toEqual(ledger.events.slice(TURN_EVENTS / 2).map((e) => e.seq));
    expect([conn.closed?.code, twin.closed?.code]).toEqual([1000, 1000]);
  });

  it("closes after the terminal event, and at once for a run that already ended", () => {
    const ledger = new FakeLedger();
    const feed = ledger.feed();
    const live = new FakeConnection("live");
    feed.open(live, 0);
    feed.publish(ledger.append("run.started"), [live]);
    feed.publish(ledger.append("run.completed"), [live]);
    expect(live.seqs()).toEqual([1, 2]);
    expect(live.closed).toEqual({ code: 1000, reason: expect.any(String) });

    const late = new FakeConnection("late");
    feed.open(late, 2);
    expect(late.sent).toEqual([{ type: "snapshot", run: { status: "completed" }, seq: 2 }]);
    expect(late.closed?.code).toBe(1000);
  });

  it("closes a connection whose send fails, without throwing, and keeps serving the others", () => {
    const ledger = new FakeLedger();
    const feed = ledger.feed();
    const broken = new FakeConnection("broken");
    const fine = new FakeConnection("fine");
    feed.open(broken, 0);
    feed.open(fine, 0);
    broken.failSends = true;
    expect(() => feed.publish(ledger.append("run.started"), [broken, fine])).not.toThrow();
    expect(broken.closed?.code).toBe(1011);
    expect(fine.seqs()).toEqual([1]);
  });

  it("keeps serving the others, the terminal event included, when one connection's state cannot be written", () => {
    const ledger = new FakeLedger();
    const feed = ledger.feed();
    const broken = new FakeConnection("broken");
    const fine = new FakeConnection("fine");
    feed.open(broken, 0);
    feed.open(fine, 0);
    broken.failStateWrites = true;
    expect(() => feed.publish(ledger.append("run.started"), [broken, fine])).not.toThrow();
    expect(broken.closed?.code).toBe(1011);
    feed.publish(ledger.append("run.completed"), [broken, fine]);
    expect(fine.seqs()).toEqual([1, 2]);
    expect(fine.closed?.code).toBe(1000);
  });
});
