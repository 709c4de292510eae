/** Plays that exist only under the test runner (TROUPE_TEST_MODE), to exercise the engine's edges. */
import { z } from "zod";
import { definePlay, rowsInput } from "../play/define";
import type { MapOptions, Row, RowContext } from "../play/types";
import { ToolCallError } from "../play/tool-error";

const TestRow = z.object({
  id: z.string().optional(),
  name: z.string(),
  domain: z.string(),
  throw: z.boolean().optional(),
  /** `shout` returns a value nested this many levels deep instead of a string. */
  deep: z.number().int().min(1).max(100_000).optional(),
  /** `shout` first logs a line this many characters long. */
  logChars: z.number().int().min(1).max(10_000_000).optional(),
});

/** `{ a: { a: ... } }`, `levels` deep, built without recursion. */
function nested(levels: number): unknown {
  let value: unknown = "leaf";
  for (let i = 0; i < levels; i++) value = { a: value };
  return value;
}

/** A map over rows with every key mode and row-error policy, plus a log line. */
export const testMap = definePlay({
  name: "test-map",
  description: "test only: ctx.map with key modes, onRowError and ctx.log",
  input: z.object({
    rows: z.array(TestRow).max(5000),
    keyMode: z.enum(["field", "function", "hash"]).default("field"),
    onRowError: z.enum(["continue", "fail"]).default("continue"),
    log: z.string().optional(),
  }),
  async run(ctx, input) {
    if (input.log) ctx.log(input.log, { rows: input.rows.length });
    const key: MapOptions["key"] =
      input.keyMode === "field" ? "id" : input.keyMode === "function" ? (row: Row) => `${row.domain}/${row.name}` : undefined;
    const items = await ctx.map(
      "items",
      input.rows,
      {
        email: async (row, c) => (await c.tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email,
        shout: (row, c) => {
          if (typeof row.logChars === "number") c.log(`${row.name}: ${"x".repeat(row.logChars)}`);
          if (row.throw) throw new Error(`boom for ${String(row.name)}`);
          if (typeof row.deep === "number") return nested(row.deep);
          return String(row.email).toUpperCase();
        },
      },
      { key, onRowError: input.onRowError },
    );
    const firstPage = await items.rows({ limit: 3 });
    return {
      total: items.total,
      completed: items.completed,
      failed: items.failed,
      duplicatesDropped: items.duplicatesDropped,
      firstKeys: firstPage.map((r) => r._key),
    };
  },
});

/** Tool calls made by the play itself, outside any map. */
export const testTool = definePlay({
  name: "test-tool",
  description: "test only: ctx.tool at play level",
  input: z.object({ name: z.string(), domain: z.string(), catchLater: z.boolean().optional() }),
  async run(ctx, input) {
    const person = { name: input.name, domain: input.domain };
    const [a, b] = await Promise.all([ctx.tool("sim_find_email", person), ctx.tool("sim_find_email", person)]);
    if (input.catchLater) {
      // A play that shrugs off a failed call, its run's cancel included.
      const later = await ctx.tool("sim_find_email", { ...person, name: `${person.name} Later` }).catch(() => null);
      return { a, b, later };
    }
    const again = await ctx.tool("sim_find_email", person);
    return { a, b, again };
  },
});

/**
 * One tool call per row, whatever the test asks: `{ rows: [{ id, tool, input }] }`
 * maps them into the dataset `calls` with the call's output in `out`.
 */
export const testCalls = definePlay({
  name: "test-calls",
  description: "test only: one ctx.tool call per row (any tool, any input)",
  input: z.object({
    rows: z.array(z.object({ id: z.string(), tool: z.string(), input: z.unknown() })).max(5000),
    dataset: z.string().default("calls"),
  }),
  async run(ctx, input) {
    const calls = await ctx.map(input.dataset, input.rows, { out: (row, c) => c.tool(String(row.tool), row.input) }, { key: "id" });
    return { total: calls.total, completed: calls.completed, failed: calls.failed };
  },
});

/** test-calls written with the play's `ctx` in the field (a closure) instead of the row's: the call is still its row's. */
export const testOuterCalls = definePlay({
  name: "test-outer-calls",
  description: "test only: one call per row through the play's ctx.tool, from a field",
  input: z.object({ rows: z.array(z.object({ id: z.string(), tool: z.string(), input: z.unknown() })).max(5000) }),
  async run(ctx, input) {
    const calls = await ctx.map("calls", input.rows, { out: (row) => ctx.tool(String(row.tool), row.input) }, { key: "id" });
    return { total: calls.total, completed: calls.completed, failed: calls.failed };
  },
});

/** A child play for the child-play tests: doubles `n`, after an optional sleep or signal, or fails on purpose. */
export const testLeaf = definePlay({
  name: "test-leaf",
  description: "test only: a child play that returns { n, doubled }",
  input: z.object({ n: z.number(), fail: z.boolean().optional(), sleepMs: z.number().optional(), waitForSignal: z.boolean().optional() }),
  async run(ctx, input) {
    if (input.sleepMs) await ctx.sleep(input.sleepMs);
    if (input.waitForSignal) await ctx.waitForEvent("go");
    if (input.fail) throw new Error(`leaf ${input.n} failed on purpose`);
    return { n: input.n, doubled: input.n * 2 };
  },
});

/** ctx.runPlay at play level: one child (twice with `twice`: the same call is one child). */
export const testParent = definePlay({
  name: "test-parent",
  description: "test only: ctx.runPlay at play level",
  input: z.object({
    leaf: z.unknown(),
    timeoutMs: z.number().optional(),
    key: z.string().optional(),
    twice: z.boolean().optional(),
    staleAfterSeconds: z.number().optional(),
  }),
  async run(ctx, { leaf, twice, ...options }) {
    const first = await ctx.runPlay("test-leaf", leaf, options);
    const second = twice ? await ctx.runPlay("test-leaf", leaf, options) : null;
    return { first, second };
  },
});

/** Nests itself `levels` deep: past the depth limit the deepest run fails. */
export const testNest = definePlay({
  name: "test-nest",
  description: "test only: runs itself as a child until levels reaches 0",
  input: z.object({ levels: z.number().int().min(0).max(20), tag: z.string().optional() }),
  async run(ctx, input): Promise<{ levels: number; below: unknown }> {
    const below = input.levels > 0 ? await ctx.runPlay("test-nest", { levels: input.levels - 1, tag: input.tag }) : null;
    return { levels: input.levels, below };
  },
});

/** Runs itself as a child with its own input: the child would be itself (a cycle), refused `play_cycle`. */
export const testSelf = definePlay({
  name: "test-self",
  description: "test only: runs itself with the same input",
  input: z.object({ tag: z.string() }),
  async run(ctx, input): Promise<unknown> {
    return { below: await ctx.runPlay("test-self", input) };
  },
});

/** One child play per row (`test-leaf` of the row's n). */
export const testMapChildren = definePlay({
  name: "test-map-children",
  description: "test only: ctx.runPlay inside ctx.map, one child per row",
  input: z.object({
    rows: z.array(z.object({ id: z.string(), n: z.number(), fail: z.boolean().optional(), sleepMs: z.number().optional() })).max(500),
    /** Call the play's own ctx from the field function instead of the row's. */
    viaPlayCtx: z.boolean().default(false),
    /** Also call ctx.sleep from the field function (which must fail the row). */
    sleepInRow: z.boolean().default(false),
    onRowError: z.enum(["continue", "fail"]).default("continue"),
  }),
  async run(ctx, input) {
    const kids = await ctx.map(
      "kids",
      input.rows,
      {
        child: async (row, c) => {
          if (input.sleepInRow) await ctx.sleep(1);
          return (input.viaPlayCtx ? ctx : c).runPlay("test-leaf", { n: row.n, fail: row.fail, sleepMs: row.sleepMs });
        },
      },
      { key: "id", onRowError: input.onRowError },
    );
    return { total: kids.total, completed: kids.completed, failed: kids.failed };
  },
});

/** Waits for signals on `keys`, one after another or all at once; `catchTimeout` returns a timeout instead of failing. */
export const testWaits = definePlay({
  name: "test-waits",
  description: "test only: ctx.waitForEvent on several keys",
  // Declared and never mapped: a dataset of the run with no rows yet.
  datasets: ["later"],
  input: z.object({
    keys: z.array(z.string()).min(1).max(12),
    timeoutMs: z.number().optional(),
    parallel: z.boolean().default(false),
    catchTimeout: z.boolean().default(false),
    /** Log lines before the waits: a ledger longer than a live replay sends in one turn. */
    logLines: z.number().int().min(0).max(10_000).default(0),
  }),
  async run(ctx, input) {
    for (let line = 1; line <= input.logLines; line++) ctx.log(`line ${line}`);
    ctx.log("waiting for", input.keys.join(","));
    try {
      const got = input.parallel
        ? await Promise.all(input.keys.map((key) => ctx.waitForEvent(key, { timeoutMs: input.timeoutMs })))
        : await input.keys.reduce<Promise<unknown[]>>(
            async (acc, key) => [...(await acc), await ctx.waitForEvent(key, { timeoutMs: input.timeoutMs })],
            Promise.resolve([]),
          );
      ctx.log("got every signal");
      return { got };
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (input.catchTimeout && code === "event_timeout") return { timedOut: code, message: (error as Error).message };
      throw error;
    }
  },
});

/** Logs, sleeps durably, logs again. */
export const testSleep = definePlay({
  name: "test-sleep",
  description: "test only: ctx.sleep between two log lines",
  input: z.object({ ms: z.number(), tag: z.string() }),
  async run(ctx, input) {
    ctx.log(`before sleep ${input.tag}`);
    await ctx.sleep(input.ms);
    ctx.log(`after sleep ${input.tag}`);
    return { slept: input.ms };
  },
});

/** A map over rows (an upload's, or in hand) keyed by a function of the row: only the play knows that key. */
export const testKeyedRows = definePlay({
  name: "test-keyed-rows",
  description: "test only: ctx.map over rowsInput keyed by a function of the row",
  input: rowsInput(z.object({ name: z.string().min(1), domain: z.string().min(1) }).loose()),
  async run(ctx, input) {
    const items = await ctx.map(
      "items",
      input.rows,
      { email: async (row, c) => (await c.tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email },
      { key: (row) => `${String(row.domain)}/${String(row.name)}` },
    );
    return { total: items.total, completed: items.completed, failed: items.failed };
  },
});

/**
 * A row whose field rejects at its first failing call while its other call is
 * still on its way (`Promise.all`): the call left behind must still end under
 * the attempt, stored and billed to the run.
 */
export const testStrayCalls = definePlay({
  name: "test-stray-calls",
  description: "test only: each row's field fails at once, leaving a valid call behind",
  input: z.object({ rows: z.array(z.object({ id: z.string(), name: z.string(), domain: z.string() })).max(1000) }),
  async run(ctx, input) {
    const rows = await ctx.map(
      "stray",
      input.rows,
      {
        out: async (row, c) => {
          const [, found] = await Promise.all([
            c.tool("sim_find_email", { name: "", domain: "" }),
            c.tool("sim_find_email", { name: row.name, domain: row.domain }),
          ]);
          return found;
        },
      },
      { key: "id" },
    );
    return { total: rows.total, completed: rows.completed, failed: rows.failed };
  },
});

/** Two maps at once (`Promise.all`): each with its own executors, neither stopping the other's attempts; or one after the other. */
export const testTwoMaps = definePlay({
  name: "test-two-maps",
  description: "test only: two maps over the same rows at the same time, or one after the other",
  input: z.object({
    rows: z.array(z.object({ id: z.string(), name: z.string(), domain: z.string() })).max(1000),
    sequential: z.boolean().default(false),
    /** The second map takes the first one's name (refused: duplicate_map_name). */
    sameName: z.boolean().default(false),
  }),
  async run(ctx, input) {
    const find = async (row: Record<string, unknown>, c: RowContext) =>
      ((await c.tool("sim_find_email", { name: row.name, domain: row.domain })) as { email: string }).email;
    const left = () => ctx.map("left", input.rows, { email: find }, { key: "id" });
    const right = () => ctx.map(input.sameName ? "left" : "right", input.rows, { email: find, side: async () => "right" }, { key: "id" });
    if (input.sequential) {
      const first = await left();
      return { left: first.completed, right: (await right()).completed };
    }
    const [l, r] = await Promise.all([left(), right()]);
    return { left: l.completed, right: r.completed };
  },
});

/**
 * Play-level calls chained per domain (find, then verify what it found), all at once, then a map whose fields read
 * their results: calls of one tool made in the order their inputs arrived, which differs between the coordinator
 * (answers from receipts come first) and an executor's replay.
 */
export const testChained = definePlay({
  name: "test-chained",
  description: "test only: chained play-level calls at once, read by a map's fields",
  input: z.object({
    domains: z.array(z.string()).min(1).max(5),
    rows: z.array(z.object({ id: z.string(), domain: z.string() })).max(100),
  }),
  async run(ctx, input) {
    const verified = await Promise.all(
      input.domains.map((domain) =>
        ctx
          .tool<{ email: string }>("sim_find_email", { name: "Chain Lookup", domain })
          .then((found) => ctx.tool<{ email: string }>("sim_verify_email", { email: found.email })),
      ),
    );
    const byDomain = new Map(input.domains.map((domain, i) => [domain, verified[i]!.email]));
    const rows = await ctx.map("chained", input.rows, { verified: (row) => byDomain.get(String(row.domain)) ?? null }, { key: "id" });
    return { completed: rows.completed };
  },
});

/** The common shape of a play that fetches its list, then enriches it: the map's rows come from a play-level ctx.fetch. */
export const testFetchedList = definePlay({
  name: "test-fetched-list",
  description: "test only: a map over rows a play-level ctx.fetch returned",
  input: z.object({ url: z.string() }),
  async run(ctx, input) {
    const listed = (await (await ctx.fetch(input.url, { headers: { Accept: "application/json" } })).json()) as {
      version: number;
      rows: { id: string; name: string; domain: string }[];
    };
    const rows = await ctx.map(
      "listed",
      listed.rows,
      {
        email: async (row, c) => (await c.tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email,
        // What the list said when the row ran: its invocation's answer.
        version: () => listed.version,
      },
      { key: "id" },
    );
    return { completed: rows.completed, failed: rows.failed };
  },
});

/** A map whose field catches its tool call's error and goes on (a row then says "caught"). */
export const testCatching = definePlay({
  name: "test-catching",
  description: "test only: a field that catches its call's error",
  input: z.object({
    rows: z.array(z.object({ id: z.string(), name: z.string(), domain: z.string() })).max(1000),
    // Calls through the play's ctx (a closure) instead of the row's.
    outer: z.boolean().default(false),
  }),
  async run(ctx, input) {
    const rows = await ctx.map(
      "leads",
      input.rows,
      {
        email: async (row, c) => {
          try {
            return (await (input.outer ? ctx : c).tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email;
          } catch {
            return "caught";
          }
        },
      },
      { key: "id" },
    );
    return { completed: rows.completed, failed: rows.failed };
  },
});

/** A map whose every error the play catches, returning instead (what docs/plays.md asks plays not to do). */
export const testSwallow = definePlay({
  name: "test-swallow",
  description: "test only: a play that catches its map's errors and returns",
  input: z.object({ rows: z.array(z.object({ id: z.string(), name: z.string(), domain: z.string() })).max(1000) }),
  async run(ctx, input) {
    try {
      const rows = await ctx.map(
        "swallow",
        input.rows,
        { email: async (row, c) => (await c.tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email },
        { key: "id" },
      );
      return { completed: rows.completed };
    } catch (error) {
      return { swallowed: String(error) };
    }
  },
});

/** A play-level call whose permanent failure the play catches (a ToolCallError, not retryable), then a map. */
export const testCaught = definePlay({
  name: "test-caught",
  description: "test only: a caught play-level tool failure before a map",
  input: z.object({ rows: z.array(z.object({ id: z.string() })).max(100) }),
  async run(ctx, input) {
    let found: string;
    try {
      found = (await ctx.tool<{ email: string }>("sim_find_email", { name: "Caught Lookup", domain: "caught.test" })).email;
    } catch (error) {
      if (!(error instanceof ToolCallError) || error.retryable) throw error;
      found = `none (${error.code})`;
    }
    const rows = await ctx.map("caught", input.rows, { found: () => found }, { key: "id" });
    return { found, completed: rows.completed };
  },
});

/** Rows whose first field returns data nested too deep to store, then whose second throws: each row fails alone. */
export const testDeepThenThrow = definePlay({
  name: "test-deep-then-throw",
  description: "test only: a field's too-deep value, then a failing field",
  input: z.object({ rows: z.array(z.object({ id: z.string() })).max(100) }),
  async run(ctx, input) {
    const rows = await ctx.map(
      "deep",
      input.rows,
      {
        nested: async () => {
          let value: Record<string, unknown> = { leaf: true };
          for (let i = 0; i < 80; i++) value = { inner: value };
          return value;
        },
        boom: async (row) => {
          if (String(row.id).endsWith("-bad")) throw new Error("the second field failed");
          return "fine";
        },
      },
      { key: "id" },
    );
    return { total: rows.total, completed: rows.completed, failed: rows.failed };
  },
});

export const testPlays = [
  testCatching,
  testFetchedList,
  testOuterCalls,
  testSwallow,
  testCaught,
  testChained,
  testMap,
  testTool,
  testCalls,
  testLeaf,
  testParent,
  testNest,
  testSelf,
  testMapChildren,
  testWaits,
  testSleep,
  testKeyedRows,
  testStrayCalls,
  testTwoMaps,
  testDeepThenThrow,
];
