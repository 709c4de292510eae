import { describe, expect, it } from "vitest";
import { MAX_JSON_DEPTH, tooDeepAt } from "./json-depth";

/** `{ a: { a: ... leaf } }`, `levels` objects deep, built without recursion. */
function nested(levels: number): unknown {
  let value: unknown = "leaf";
  for (let i = 0; i < levels; i++) value = { a: value };
  return value;
}

describe("tooDeepAt", () => {
  it("accepts values up to the limit and names where a deeper one goes past it", () => {
    expect(tooDeepAt(nested(MAX_JSON_DEPTH))).toBeNull();
    expect(tooDeepAt(nested(MAX_JSON_DEPTH + 1))).toEqual(Array(MAX_JSON_DEPTH).fill("a"));
    expect(tooDeepAt({ ok: [1], list: [[["x"]]] }, 3)).toEqual(["list", "0", "0"]);
    expect(tooDeepAt("scalar", 0)).toBeNull();
  });

  it("handles 10,000 levels without overflowing the stack", () => {
    expect(tooDeepAt(nested(10_000))).not.toBeNull();
  });
});
