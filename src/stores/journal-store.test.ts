import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { createSql } from "./sql";
import { JournalStore } from "./journal-store";

describe("JournalStore.open", () => {
  it("reads the clock once: a wait's timeout is exactly timeoutMs after it began, however the clock moves", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`journal-${crypto.randomUUID()}`);
    const entry = await runInDurableObject(stub, (_object, state) => {
      let clock = 1_000;
      const journal = new JournalStore({ sql: createSql(state.storage), now: () => clock++ });
      return journal.open({ key: "event:approve:0", kind: "event", eventKey: "approve", dueInMs: 300, timeoutMs: 300 });
    });
    expect(entry.timeoutAt! - entry.createdAt).toBe(300);
    expect(entry.dueAt).toBe(entry.timeoutAt);
  });
});

describe("JournalStore.childCount", () => {
  it("counts a child once however many entries (identical calls with different timeouts) wait on it", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`journal-${crypto.randomUUID()}`);
    const counts = await runInDurableObject(stub, (_object, state) => {
      const journal = new JournalStore({ sql: createSql(state.storage), now: () => 1_000 });
      const open = (key: string, timeoutMs: number | null) =>
        journal.open({ key, kind: "child", childPlay: "leaf", dueInMs: null, timeoutMs });
      open("child:input:a", null);
      open("child:input:a:timeout:800", 800);
      const unbound = journal.childCount();
      journal.bindChild("child:input:a", "run_a", true, null);
      journal.bindChild("child:input:a:timeout:800", "run_a", true, null);
      open("child:input:b", null);
      return { unbound, bound: journal.childCount() };
    });
    // Not yet bound, two entries may still be two children; bound to one, they are one, beside another child.
    expect(counts).toEqual({ unbound: 2, bound: 2 });
  });
});

describe("JournalStore.parentsToTell", () => {
  it("tells a parent a lower figure once it counts no child's allotment, and the same figure once it stops counting one", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`journal-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const journal = new JournalStore({ sql: createSql(state.storage), now: Date.now });
      journal.addWatcher("run_parent");
      expect(journal.parentsToTell(5, true)).toEqual([{ runId: "run_parent", again: false, gaveUp: false }]);
      journal.markTold("run_parent", 5, true);
      // Counting a child's allotment still: only a larger figure is told.
      expect(journal.parentsToTell(3, true)).toEqual([]);
      expect(journal.parentsToTell(6, true)).toEqual([{ runId: "run_parent", again: true, gaveUp: false }]);
      // Counting none: a lower figure is told, and so is the same one (the parent holds it as one that may drop).
      expect(journal.parentsToTell(3)).toEqual([{ runId: "run_parent", again: true, gaveUp: false }]);
      expect(journal.parentsToTell(5)).toEqual([{ runId: "run_parent", again: true, gaveUp: false }]);
      journal.markTold("run_parent", 3);
      expect(journal.parentsToTell(3)).toEqual([]);
      expect(journal.parentsToTell(4)).toEqual([{ runId: "run_parent", again: true, gaveUp: false }]);
    });
  });

  it("tells a parent that gave the run up only its spend, even one whose first telling failed; one it moved from, nothing more", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`journal-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      const journal = new JournalStore({ sql: createSql(state.storage), now: Date.now });
      journal.addWatcher("run_gave_up");
      journal.addWatcher("run_moved_from");
      journal.markGaveUp("run_gave_up");
      journal.markGaveUp("run_moved_from");
      journal.markMoved("run_moved_from", 2);
      expect(journal.parentsToTell(5)).toEqual([{ runId: "run_gave_up", again: false, gaveUp: true }]);
      journal.markTold("run_gave_up", 5);
      expect(journal.parentsToTell(5)).toEqual([]);
      // Bills that reach the run after its end are told it again.
      expect(journal.parentsToTell(6)).toEqual([{ runId: "run_gave_up", again: true, gaveUp: true }]);
    });
  });
});

describe("JournalStore.settledSinceParked", () => {
  it("says whether an entry settled since the play that parked the run began, and whether a wait but a child's is due", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`journal-${crypto.randomUUID()}`);
    await runInDurableObject(stub, (_object, state) => {
      let clock = 1_000;
      const journal = new JournalStore({ sql: createSql(state.storage), now: () => clock });
      // Never parked (a run parked before this was kept): the play runs.
      expect(journal.settledSinceParked()).toBe(true);
      journal.open({ key: "child:input:a", kind: "child", childPlay: "leaf", dueInMs: null, timeoutMs: null });
      journal.bindChild("child:input:a", "run_a", true, 1_100);
      journal.open({ key: "sleep:1", kind: "sleep", dueInMs: 500, timeoutMs: null });
      const began = journal.settles();
      // An entry settled while the play ran, after it had looked: the next alarm replays it.
      journal.open({ key: "event:go:2", kind: "event", eventKey: "go", dueInMs: null, timeoutMs: null });
      journal.settle("event:go:2", { state: "done", result: 1 });
      journal.notePark(began);
      expect(journal.settledSinceParked()).toBe(true);
      // Parked with a map's chunks stopped: its other rows go on at the next alarm.
      journal.notePark(null);
      expect(journal.settledSinceParked()).toBe(true);
      journal.notePark(journal.settles());
      expect(journal.settledSinceParked()).toBe(false);
      clock = 1_200;
      // Only the child's check is due: no replay for it.
      expect(journal.othersDue(clock)).toBe(false);
      clock = 1_500;
      expect(journal.othersDue(clock)).toBe(true);
      journal.settle("child:input:a", { state: "done", result: 2 });
      expect(journal.settledSinceParked()).toBe(true);
    });
  });
});
