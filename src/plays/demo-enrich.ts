import { z } from "zod";
import { definePlay, RowId, rowsInput } from "../play/define";

/** API.md's demo: find each lead's email, then verify it. */
export const demoEnrich = definePlay({
  name: "demo-enrich",
  description: "Finds and verifies an email for each lead (id, name, domain) with the simulated provider.",
  datasets: ["leads"],
  input: rowsInput(z.object({ id: RowId, name: z.string().max(500), domain: z.string().max(253) }).loose()),
  async run(ctx, input) {
    const leads = await ctx.map(
      "leads",
      input.rows,
      {
        email: async (row, c) => (await c.tool<{ email: string }>("sim_find_email", { name: row.name, domain: row.domain })).email,
        verdict: async (row, c) => (await c.tool<{ verdict: string }>("sim_verify_email", { email: row.email })).verdict,
      },
      { key: "id", onRowError: "continue" },
    );
    return { rows: leads.completed, failed: leads.failed };
  },
});
