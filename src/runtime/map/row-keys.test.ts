import { describe, expect, it } from "vitest";
import { planRows } from "./row-keys";

describe("planRows with a key field", () => {
  it("reads the key as the row's own field: a row without it has no key, whatever Object.prototype holds", async () => {
    for (const field of ["toString", "constructor", "valueOf"]) {
      await expect(planRows([{ name: "no key here" }], field)).rejects.toMatchObject({ code: "invalid_row_key" });
    }
    const plan = await planRows([{ toString: "k1" }, { toString: "k2" }], "toString");
    expect(plan.rows.map((r) => r.key)).toEqual(["k1", "k2"]);
  });
});

describe("planRows keys", () => {
  it('takes strings and numbers (7 and "7" are one row), and refuses what would collide written as a string', async () => {
    const plan = await planRows([{ id: 7 }, { id: "7" }, { id: "x" }, { id: 10n as unknown }], "id");
    expect(plan.rows.map((r) => r.key)).toEqual(["7", "x", "10"]);
    expect(plan.duplicatesDropped).toBe(1);
    // Every object was "[object Object]", every promise "[object Promise]": all rows but the first were dropped as duplicates.
    for (const bad of [{ a: 1 }, [1, 2], true, Number.NaN]) {
      await expect(planRows([{ id: bad }, { id: bad }], "id")).rejects.toMatchObject({ code: "invalid_row_key" });
    }
    // TypeScript refuses an async key function; a play built without it does not.
    const asyncKey = (async (row: { email?: unknown }) => String(row.email)) as unknown as (row: object) => string;
    await expect(planRows([{ email: "a@x" }, { email: "b@x" }], asyncKey)).rejects.toMatchObject({
      code: "invalid_row_key",
      message: expect.stringContaining("must not be async"),
    });
  });
});

describe("planRows keys that are numbers past 2^53", () => {
  it("refuses a whole-number key past 2^53, naming the row: JSON parsed distinct ids to one double, merging their rows", async () => {
    // 12345678901234567890 and ...891 as JSON numbers: both parse to 12345678901234567000.
    const rows = JSON.parse('[{"id":1},{"id":12345678901234567890},{"id":12345678901234567891}]') as { id: number }[];
    await expect(planRows(rows, "id")).rejects.toMatchObject({
      code: "invalid_row_key",
      message: expect.stringMatching(/^row 1 has a key that is a number past 9007199254740991.*send the id as a string/),
    });
    await expect(planRows([{ id: 2 ** 53 }], (row) => (row as { id: number }).id as unknown as string)).rejects.toMatchObject({
      code: "invalid_row_key",
    });
  });

  it("keeps taking ordinary numbers: safe integers, negatives and fractions", async () => {
    const ids = [Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER, 0, 1.5, 1e-7];
    const plan = await planRows(
      ids.map((id) => ({ id })),
      "id",
    );
    expect(plan.rows.map((r) => r.key)).toEqual(ids.map(String));
  });
});
