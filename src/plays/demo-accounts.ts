import { z } from "zod";
import { definePlay, RowId } from "../play/define";

const Account = z
  .object({
    id: RowId,
    domain: z.string().min(1).max(253),
    people: z.array(z.string().min(1).max(500)).max(1000),
  })
  .loose();

/**
 * API.md's child-play demo: each account's people are enriched by a child run
 * of `demo-enrich` (one child per account, rows `<account id>-<index>`), and
 * the account's `leads` holds that child's result `{ rows, failed }`.
 */
export const demoAccounts = definePlay({
  name: "demo-accounts",
  description:
    "For each account (id, domain, people), runs demo-enrich as a child play over its people; leads holds the child's { rows, failed }.",
  datasets: ["accounts"],
  input: z.object({ accounts: z.array(Account).max(10_000) }).strict(),
  async run(ctx, input) {
    const accounts = await ctx.map(
      "accounts",
      input.accounts,
      {
        leads: (account, c) => {
          const people = account.people as string[];
          const rows = people.map((name, i) => ({ id: `${String(account.id)}-${i}`, name, domain: account.domain }));
          return c.runPlay<{ rows: number; failed: number }>("demo-enrich", { rows });
        },
      },
      { key: "id", onRowError: "continue" },
    );
    return { rows: accounts.completed, failed: accounts.failed };
  },
});
