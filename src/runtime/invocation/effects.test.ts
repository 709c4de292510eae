import { describe, expect, it } from "vitest";
import { Effects } from "./effects";
import { EffectTrace, MAX_TRACED_FETCH_BYTES, UNREPLAYABLE } from "./effect-trace";
import type { TracedResponse } from "../../contracts/executors";

describe("Effects", () => {
  it("gives each play-level effect its ordinal among the effects of its kind and name", () => {
    const effects = new Effects();
    const place = (kind: "sleep" | "wait" | "log", name: string) => effects.make(kind, name, false, { play: (call) => call });
    expect(place("sleep", "")).toEqual({ kind: "sleep", name: "", ordinal: 0 });
    expect(place("wait", "approve")).toMatchObject({ ordinal: 0 });
    expect(place("wait", "approve")).toMatchObject({ ordinal: 1 });
    expect(place("wait", "reject")).toMatchObject({ ordinal: 0 });
    expect(place("sleep", "")).toMatchObject({ ordinal: 1 });
    // A fresh invocation replays from the top: the same calls get the same places.
    expect(new Effects().make("sleep", "", false, { play: (call) => call.ordinal })).toBe(0);
  });

  it("refuses waits and sleeps in a row, sends a row's tool calls, children and log lines to the row, and counts none of them", () => {
    const effects = new Effects();
    expect(() => effects.make("sleep", "", true, { play: () => "play" })).toThrow(expect.objectContaining({ code: "wait_in_row" }));
    expect(() => effects.make("wait", "k", true, { play: () => "play" })).toThrow(expect.objectContaining({ code: "wait_in_row" }));
    expect(effects.make("child", "p", true, { play: () => "play", row: () => "row" })).toBe("row");
    expect(effects.make("log", "", true, { play: () => "play", row: () => "row" })).toBe("row");
    // A tool call made from a row through the play's ctx is the row's; a map made there acts at play level.
    expect(effects.make("tool", "t", true, { play: (call) => call.ordinal, row: () => -1 })).toBe(-1);
    expect(effects.make("map", "m", true, { play: (call) => call.ordinal, row: () => -1 })).toBe(0);
    expect(effects.make("tool", "t", false, { play: (call) => call.ordinal })).toBe(0);
    expect(effects.make("child", "p", false, { play: (call) => call.ordinal })).toBe(0);
    expect(effects.make("log", "", false, { play: (call) => call.ordinal })).toBe(0);
  });
});

describe("EffectTrace's play-level fetches", () => {
  it("keeps responses for replays up to MAX_TRACED_FETCH_BYTES in all; a fetch past them is not replayable", async () => {
    const trace = new EffectTrace();
    const fetchOf = async (ordinal: number, bytes: number) => {
      const response = trace.keep(new Response(new Uint8Array(bytes).fill(65), { status: 201, headers: { "x-page": String(ordinal) } }));
      trace.record({ kind: "fetch", name: "", ordinal }, response, null);
      return response;
    };
    const first = await fetchOf(0, MAX_TRACED_FETCH_BYTES - 10);
    // The play reads its copy; what the trace keeps is the same bytes.
    expect((await first.text()).length).toBe(MAX_TRACED_FETCH_BYTES - 10);
    await fetchOf(1, 11);
    await fetchOf(2, 10);
    const [kept, over, fits] = trace.snapshot();
    expect(kept!.outcome).toMatchObject({ ok: true, value: { status: 201, headers: [["x-page", "0"]] } });
    expect(over!.outcome).toMatchObject({ ok: false, code: UNREPLAYABLE });
    expect(fits!.outcome).toMatchObject({ ok: true });
    expect(((fits!.outcome as { value: TracedResponse }).value.body as Uint8Array).byteLength).toBe(10);
  });
});
