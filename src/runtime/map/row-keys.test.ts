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
