/** Plays that exist only under the test runner (TROUPE_TEST_MODE), to exercise the engine's edges. */
import { z } from "zod";
import { definePlay } from "../play/define";
import type { MapOptions, Row } from "../play/types";

const TestRow = z.object({ id: z.string().optional(), name: z.string(), domain: z.string(), throw: z.boolean().optional() });

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
    const key: MapOptions["key"] = input.keyMode === "field" ? "id" : input.keyMode === "function" ? (row: Row) => `${row.domain}/${row.name}` : undefined;
    const items = await ctx.map(
      "items",
      input.rows,
      {
        email: async (row, c) => (await c.tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email,
        shout: (row) => {
          if (row.throw) throw new Error(`boom for ${String(row.name)}`);
          return String(row.email).toUpperCase();
        },
      },
      { key, onRowError: input.onRowError },
    );
    const firstPage = await items.rows({ limit: 3 });
    return { total: items.total, completed: items.completed, failed: items.failed, duplicatesDropped: items.duplicatesDropped, firstKeys: firstPage.map((r) => r._key) };
  },
});

/** Tool calls made by the play itself, outside any map. */
export const testTool = definePlay({
  name: "test-tool",
  description: "test only: ctx.tool at play level",
  input: z.object({ name: z.string(), domain: z.string() }),
  async run(ctx, input) {
    const [a, b] = await Promise.all([ctx.tool("sim_find_email", input), ctx.tool("sim_find_email", input)]);
    const again = await ctx.tool("sim_find_email", input);
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

export const testPlays = [testMap, testTool, testCalls];
