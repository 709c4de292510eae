/** Test plays beyond testing.ts (which is full). */
import { z } from "zod";
import { definePlay, rowsInput } from "../play/define";
import type { PlayContext } from "../play/types";

/** Two stages: the second map reads the first one's stored rows (`handle.rows()`). */
export const testStages = definePlay({
  name: "test-stages",
  description: "test only: a map over the rows an earlier map stored (find, then verify what it found)",
  input: z.object({ rows: z.array(z.object({ id: z.string(), name: z.string(), domain: z.string() })).max(1000) }),
  async run(ctx, input) {
    const found = await ctx.map(
      "stage-found",
      input.rows,
      { email: async (row, c) => ((await c.tool("sim_find_email", { name: row.name, domain: row.domain })) as { email: string }).email },
      { key: "id" },
    );
    const emails = (await found.rows()).map((row) => ({ id: String(row._key), email: String(row.email) }));
    const verified = await ctx.map(
      "stage-verified",
      emails,
      { verdict: async (row, c) => ((await c.tool("sim_verify_email", { email: row.email })) as { verdict: string }).verdict },
      { key: "id" },
    );
    return { found: found.completed, verified: verified.completed };
  },
});

/** Returns a result of about `chars` characters, or one JSON cannot hold (a cycle). */
export const testResult = definePlay({
  name: "test-result",
  description: "test only: returns a result of the size asked for, or a cyclic one",
  input: z.object({
    chars: z.number().int().min(0).max(4_000_000).default(0),
    char: z.string().length(1).default("x"),
    cyclic: z.boolean().default(false),
  }),
  async run(_ctx, input) {
    if (input.cyclic) {
      const result: Record<string, unknown> = {};
      result.self = result;
      return result;
    }
    return { padding: input.char.repeat(input.chars) };
  },
});

/** Changes a play-level call's answer before its map: every replay of the play must start from the answer as given. */
export const testMutating = definePlay({
  name: "test-mutating",
  description: "test only: a play-level answer changed in place before a map whose fields read it",
  input: z.object({ rows: z.array(z.object({ id: z.string() })).max(5000) }),
  async run(ctx, input) {
    const found = await ctx.tool<{ email: string; seen?: number }>("sim_find_email", { name: "Mutated", domain: "mutating.test" });
    found.seen = (found.seen ?? 0) + 1;
    const seen = found.seen;
    const mapped = await ctx.map(
      "mutated",
      input.rows,
      {
        seen: async (_row, c) => {
          await c.tool("sim_verify_email", { email: found.email });
          return seen;
        },
      },
      { key: "id" },
    );
    return { completed: mapped.completed };
  },
});

/** Rows as large as asked for (no tool calls): an export of them spans several parts (`DatasetExporter`). */
export const testPadded = definePlay({
  name: "test-padded",
  description: "test only: a map that stores each row with a padding field of the size asked for",
  input: z.object({
    rows: z.array(z.object({ id: z.string(), label: z.string(), chars: z.number().int().min(0).max(500_000) })).max(2000),
  }),
  async run(ctx, input) {
    const padded = await ctx.map("padded", input.rows, { padding: (row) => "x".repeat(Number(row.chars)) }, { key: "id" });
    return { completed: padded.completed };
  },
});

const callOptions = z.object({ staleAfterSeconds: z.number().optional(), force: z.boolean().optional() });

/**
 * One call made by the play itself, outside any map (any tool, any input, with `staleAfterSeconds` if given): its
 * answer is the run's result. With `sleepMs` the play sleeps after it, so the call is replayed when the play wakes;
 * `detached`, the sleep starts while the call is pending. `also` makes the same call with other options beside it.
 */
export const testPlayCall = definePlay({
  name: "test-play-call",
  description: "test only: one play-level ctx.tool call (any tool, any input)",
  input: callOptions.extend({
    tool: z.string(),
    input: z.unknown(),
    sleepMs: z.number().optional(),
    detached: z.boolean().optional(),
    also: callOptions.optional(),
  }),
  async run(ctx, input) {
    const options = input.staleAfterSeconds === undefined ? undefined : { staleAfterSeconds: input.staleAfterSeconds };
    const call = ctx.tool(input.tool, input.input, options);
    call.catch(() => {});
    const also = input.also && ctx.tool(input.tool, input.input, input.also);
    if (input.detached && input.sleepMs) await ctx.sleep(input.sleepMs);
    const out = await call;
    if (input.sleepMs && !input.detached) await ctx.sleep(input.sleepMs);
    return also ? { out, also: await also } : { out };
  },
});

/** A site of "!throw" makes the row schema's transform throw; a row without an email, the key function. */
const fragileRow = z.object({
  id: z.string(),
  email: z.string().optional(),
  site: z
    .string()
    .optional()
    .transform((site) => {
      if (site === "!throw") throw new Error("site is not a URL");
      return site;
    }),
});

/** Rows on which the play's own code throws (its schema's transform, its key function): each fails alone. */
export const testFragileRows = definePlay({
  name: "test-fragile-rows",
  description: "test only: a row schema and a key function that throw on some rows",
  input: rowsInput(fragileRow),
  async run(ctx, input) {
    const email = (row: { email?: unknown }) => (row.email as string).toLowerCase();
    const mapped = await ctx.map("fragile", input.rows, { lower: (row) => email(row) }, { key: (row) => email(row) });
    return { completed: mapped.completed, failed: mapped.failed };
  },
});

/** Starts a child (`test-leaf`, waiting for a signal) and, while it runs, makes one play-level call. */
export const testChildBesideCall = definePlay({
  name: "test-child-beside-call",
  description: "test only: a child play started beside a play-level call",
  input: z.object({ tool: z.string(), input: z.unknown(), n: z.number().default(1) }),
  async run(ctx, input) {
    const child = ctx.runPlay("test-leaf", { n: input.n, waitForSignal: true });
    child.catch(() => {});
    const out = await ctx.tool(input.tool, input.input);
    return { out, child: await child };
  },
});

/**
 * Returns while a play-level call it did not await is in flight (sent beside one it awaited): the run ends once the
 * call has. It logs `returning` as it returns (or throws the awaited call's failure).
 */
export const testReturnBesideCall = definePlay({
  name: "test-return-beside-call",
  description: "test only: returns while a play-level tool call it did not await is in flight",
  input: z.object({
    left: z.object({ tool: z.string(), input: z.unknown() }),
    awaited: z.object({ tool: z.string(), input: z.unknown() }),
  }),
  async run(ctx, { left, awaited }) {
    ctx.tool(left.tool, left.input).catch(() => {});
    try {
      await ctx.tool(awaited.tool, awaited.input);
    } finally {
      ctx.log("returning");
    }
    return { returned: true };
  },
});

/** Each row's field throws the row's `message`: what a failed row stores of an error (a provider's, quoting its key). */
export const testThrowingRows = definePlay({
  name: "test-throwing-rows",
  description: "test only: a map whose field throws each row's message",
  input: z.object({ rows: z.array(z.object({ id: z.string(), message: z.string() })).max(100) }),
  async run(ctx, input) {
    const thrown = await ctx.map(
      "thrown",
      input.rows,
      {
        out: (row) => {
          throw new Error(String(row.message));
        },
      },
      { key: "id" },
    );
    return { failed: thrown.failed };
  },
});

/** demo-enrich's two fields calling the play's own `ctx` (a closure) instead of the row's: the calls are the row's. */
export const testOuterFields = definePlay({
  name: "test-outer-fields",
  description: "test only: a find and a verify made through the play's ctx from the map's fields",
  input: z.object({ rows: z.array(z.object({ id: z.string(), name: z.string(), domain: z.string() })).max(1000) }),
  async run(ctx, input) {
    const leads = await ctx.map(
      "outer-fields",
      input.rows,
      {
        email: async (row) => (await ctx.tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email,
        verdict: async (row) => (await ctx.tool<{ verdict: string }>("sim_verify_email", { email: row.email })).verdict,
      },
      { key: "id" },
    );
    return { completed: leads.completed, failed: leads.failed };
  },
});

/**
 * ctx.fetch of each row's URL (and of `playUrl` at play level), with the given
 * headers; each outcome is `{ ok, status }` or the error's `{ code, message }`.
 * `logHeaders` logs the headers, to check that their secret values are redacted;
 * `throwHeaders` fails each row (`rows`), or the play once its play-level fetch
 * is made (`play`), with an error quoting them.
 */
export const testFetch = definePlay({
  name: "test-fetch",
  description: "test only: ctx.fetch from rows and from the play",
  input: z.object({
    rows: z.array(z.object({ id: z.string(), url: z.string() })).max(100),
    headers: z.record(z.string(), z.string()).default({}),
    playUrl: z.string().optional(),
    logHeaders: z.boolean().default(false),
    throwHeaders: z.enum(["rows", "play"]).optional(),
  }),
  async run(ctx, input) {
    const attempt = async (
      fetcher: { fetch(url: string, init?: RequestInit): Promise<Response> },
      url: string,
      log: (...args: unknown[]) => void,
    ) => {
      try {
        const res = await fetcher.fetch(url, { headers: input.headers });
        return { ok: true, status: res.status };
      } catch (error) {
        if (input.logHeaders) log("fetch failed with headers", JSON.stringify(input.headers));
        return { ok: false, code: (error as { code?: string }).code ?? null, message: (error as Error).message };
      }
    };
    const playLevel = input.playUrl ? await attempt(ctx, input.playUrl, (...a) => ctx.log(...a)) : null;
    if (input.throwHeaders === "play") throw new Error(`refused with headers ${Object.values(input.headers).join(" ")}`);
    const fetched = await ctx.map(
      "fetches",
      input.rows,
      {
        outcome: async (row, c) => {
          const outcome = await attempt(c, String(row.url), (...a) => c.log(...a));
          if (input.throwHeaders === "rows") throw new Error(`refused with headers ${Object.values(input.headers).join(" ")}`);
          return outcome;
        },
      },
      { key: "id" },
    );
    return { playLevel, completed: fetched.completed, failed: fetched.failed };
  },
});

const lead = z.object({ id: z.string(), name: z.string(), domain: z.string() });

/** Two maps at once over rows of their own (`a`, `b`): one may stop (rows leased elsewhere) while the other runs. */
export const testTwoInputs = definePlay({
  name: "test-two-inputs",
  description: "test only: two maps at once, each over its own rows",
  input: z.object({ a: z.array(lead).max(2000), b: z.array(lead).max(2000) }),
  async run(ctx, input) {
    const find = async (row: Record<string, unknown>, c: { tool(id: string, input: unknown): Promise<unknown> }) =>
      ((await c.tool("sim_find_email", { name: row.name, domain: row.domain })) as { email: string }).email;
    const [a, b] = await Promise.all([
      ctx.map("input-a", input.a, { email: find }, { key: "id" }),
      ctx.map("input-b", input.b, { email: find }, { key: "id" }),
    ]);
    return { a: a.completed, b: b.completed };
  },
});

/** Starts a map of finds over `rows` without awaiting it and returns (a play with a missing `await`). */
export const testUnawaitedMap = definePlay({
  name: "test-unawaited-map",
  description: "test only: ctx.map not awaited, the play returning while it runs",
  input: z.object({ rows: z.array(z.object({ id: z.string(), name: z.string(), domain: z.string() })).max(1000) }),
  async run(ctx, input) {
    void ctx.map(
      "unawaited",
      input.rows,
      { email: async (row, c) => (await c.tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email },
      { key: "id" },
    );
    return { returned: true };
  },
});

/** Calls `test-leaf` without awaiting it (a bare call, `void`) and returns at once: the child is the play's all the same. */
export const testDetachedChild = definePlay({
  name: "test-detached-child",
  description: "test only: ctx.runPlay not awaited, the play returning before the call is answered",
  input: z.object({ leaf: z.unknown() }),
  async run(ctx, input) {
    void ctx.runPlay("test-leaf", input.leaf);
    return { returned: true };
  },
});

/** One `test-leaf` call made at once with each of `timeouts` (null: none); each call's outcome: its result or error code. */
export const testChildTimeouts = definePlay({
  name: "test-child-timeouts",
  description: "test only: the same ctx.runPlay call made at once with different timeoutMs",
  input: z.object({ leaf: z.unknown(), timeouts: z.array(z.number().nullable()).min(1).max(4) }),
  async run(ctx, input) {
    const calls = input.timeouts.map((timeoutMs) => ctx.runPlay("test-leaf", input.leaf, timeoutMs === null ? {} : { timeoutMs }));
    const settled = await Promise.allSettled(calls);
    return settled.map((s) => (s.status === "fulfilled" ? { result: s.value } : { code: (s.reason as { code?: string }).code ?? null }));
  },
});

const Lead = z.object({ id: z.string(), name: z.string(), domain: z.string() });

/** demo-enrich's two fields (a find, 1 credit, and a verify, 0.25) over `rows`, as the map `name`. */
function enrichLeads(ctx: PlayContext, name: string, rows: z.infer<typeof Lead>[]) {
  return ctx.map(
    name,
    rows,
    {
      email: async (row, c) => (await c.tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email,
      verdict: async (row, c) => (await c.tool<{ verdict: string }>("sim_verify_email", { email: row.email })).verdict,
    },
    { key: "id" },
  );
}

/** Finds and verifies an email for each lead of `first`, waits for the signal `go`, then does `second` the same way. */
export const testEnrichInTwo = definePlay({
  name: "test-enrich-in-two",
  description: "test only: demo-enrich over `first`, then a wait for the signal go, then over `second`",
  input: z.object({ first: z.array(Lead).max(1000), second: z.array(Lead).max(1000) }),
  async run(ctx, input) {
    const enrich = (name: string, rows: z.infer<typeof Lead>[]) => enrichLeads(ctx, name, rows);
    const first = await enrich("first", input.first);
    await ctx.waitForEvent("go");
    const second = await enrich("second", input.second);
    return { rows: first.completed + second.completed, failed: first.failed + second.failed };
  },
});

/** Runs one child play at play level and returns its result: parents with the same `play` and `input` share it. */
export const testRunChild = definePlay({
  name: "test-run-child",
  description: "test only: ctx.runPlay(play, input) at play level",
  input: z.object({ play: z.string(), input: z.unknown() }),
  async run(ctx, input) {
    return { child: await ctx.runPlay(input.play, input.input) };
  },
});

/**
 * Waits for a decision, falling back on any error (a catch-all, as docs/plays.md asks plays not to write), then logs
 * it and makes a tool call that depends on it: the fallback must run only if the wait really failed.
 */
export const testWaitFallback = definePlay({
  name: "test-wait-fallback",
  description: "test only: a catch-all fallback around ctx.waitForEvent, then effects that depend on the decision",
  input: z.object({ key: z.string(), timeoutMs: z.number().optional() }),
  async run(ctx, input) {
    const decision = await ctx.waitForEvent<{ ok: boolean }>(input.key, { timeoutMs: input.timeoutMs }).catch(() => ({ ok: false }));
    ctx.log(`decided ${decision.ok ? "yes" : "no"}`);
    const name = decision.ok ? "Approved Person" : "Rejected Person";
    const { email } = await ctx.tool<{ email: string }>("sim_find_email", { name, domain: `${input.key}.test` });
    return { ok: decision.ok, email };
  },
});

/**
 * Runs a child play with `timeoutMs` (its outcome: its result, or `child_timeout`), waits for the signal `go`, then
 * enriches `leads` as demo-enrich does.
 */
export const testChildThenEnrich = definePlay({
  name: "test-child-then-enrich",
  description: "test only: ctx.runPlay with a timeout, a wait for the signal go, then demo-enrich over `leads`",
  input: z.object({ play: z.string(), input: z.unknown(), timeoutMs: z.number(), leads: z.array(Lead).max(100) }),
  async run(ctx, input) {
    // Only the timeout is caught (a child still running does not settle the call: the run waits, docs/plays.md).
    const child = await ctx.runPlay(input.play, input.input, { timeoutMs: input.timeoutMs }).then(
      (result) => ({ result }),
      (error: { code?: string }) => {
        if (error.code !== "child_timeout") throw error;
        return { code: error.code };
      },
    );
    await ctx.waitForEvent("go");
    const leads = await enrichLeads(ctx, "leads", input.leads);
    return { child, completed: leads.completed, failed: leads.failed };
  },
});

/** demo-enrich's find over `rows`; a row with `child` also runs `test-leaf` of that n, waiting for its signal `go`. */
export const testMapOneChild = definePlay({
  name: "test-map-one-child",
  description: "test only: a map of tool calls in which some rows also run a child play that waits for a signal",
  input: z.object({
    rows: z.array(z.object({ id: z.string(), name: z.string(), domain: z.string(), child: z.number().optional() })).max(1000),
  }),
  async run(ctx, input) {
    const mapped = await ctx.map(
      "rows",
      input.rows,
      {
        email: async (row, c) => (await c.tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email,
        child: (row, c) => (typeof row.child === "number" ? c.runPlay("test-leaf", { n: row.child, waitForSignal: true }) : null),
      },
      { key: "id" },
    );
    return { completed: mapped.completed, failed: mapped.failed };
  },
});

/**
 * Runs `test-leaf` falling back on any error (a catch-all: `.catch`, or with `tryCatch` a `try` around its `await`),
 * then logs which it got and makes a tool call that depends on it: the fallback must run only if the child really
 * failed or timed out, never while it still runs.
 */
export const testChildFallback = definePlay({
  name: "test-child-fallback",
  description: "test only: a catch-all fallback around ctx.runPlay, then effects that depend on the child's answer",
  input: z.object({ leaf: z.unknown(), domain: z.string(), timeoutMs: z.number().optional(), tryCatch: z.boolean().default(false) }),
  async run(ctx, input) {
    const options = input.timeoutMs === undefined ? {} : { timeoutMs: input.timeoutMs };
    let child: { doubled: number } | null;
    if (input.tryCatch) {
      try {
        child = await ctx.runPlay<{ doubled: number }>("test-leaf", input.leaf, options);
      } catch {
        child = null;
      }
    } else child = await ctx.runPlay<{ doubled: number }>("test-leaf", input.leaf, options).catch(() => null);
    ctx.log(`child ${child === null ? "fell back" : "answered"}`);
    const name = child === null ? "Fallback Person" : "Child Person";
    const { email } = await ctx.tool<{ email: string }>("sim_find_email", { name, domain: input.domain });
    return { doubled: child?.doubled ?? null, email };
  },
});

/** The same as `test-child-fallback` in a field function: one `test-leaf` per row, waiting for its signal `go`. */
export const testRowChildFallback = definePlay({
  name: "test-row-child-fallback",
  description: "test only: a catch-all fallback around a row's ctx.runPlay, then a row's tool call that depends on it",
  input: z.object({ rows: z.array(z.object({ id: z.string(), n: z.number() })).max(10), domain: z.string(), timeoutMs: z.number() }),
  async run(ctx, input) {
    const rows = await ctx.map(
      "rows",
      input.rows,
      {
        email: async (row, c) => {
          const leaf = await c.runPlay("test-leaf", { n: row.n, waitForSignal: true }, { timeoutMs: input.timeoutMs }).catch(() => null);
          const name = leaf === null ? "Fallback Person" : "Child Person";
          return (await c.tool<{ email: string }>("sim_find_email", { name, domain: `${row.id}.${input.domain}` })).email;
        },
      },
      { key: "id" },
    );
    return { completed: rows.completed, failed: rows.failed };
  },
});
