import { describe, expect, it } from "vitest";
import { infiniteNumberAt, MAX_JSON_DEPTH, tooDeepAt } from "./json-depth";

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

  it("walks an array of millions of items, and a sparse one, naming the first item too deep", () => {
    const wide: unknown[] = Array(3_000_000).fill(0);
    expect(tooDeepAt(wide, 1)).toBeNull();
    wide[2_999_999] = [[1]];
    expect(tooDeepAt(wide, 2)).toEqual(["2999999", "0"]);
    // A hole is no value (an array built with a length, or a `delete`d item).
    const sparse: unknown[] = [];
    sparse[5] = { a: [] };
    expect(tooDeepAt(sparse, 3)).toBeNull();
    expect(tooDeepAt(sparse, 2)).toEqual(["5", "a"]);
  });
});

describe("infiniteNumberAt", () => {
  const at = (text: string) => infiniteNumberAt(text, JSON.parse(text));
  it("names a number past a double's range, which JSON.stringify writes as null", () => {
    expect(at('{"a":[1,{"b":1e400}]}')).toEqual(["a", "1", "b"]);
    expect(at("-1E+309")).toEqual([]);
    expect(at(`{"n":${"9".repeat(309)}}`)).toEqual(["n"]);
    expect(at(`{"n":1${"0".repeat(250)}e99}`)).toEqual(["n"]);
    expect(at('[[],{"a":[2,{}],"b":[3,{"c":[4,-1e999]}]}]')).toEqual(["1", "b", "1", "c", "1"]);
  });

  it("passes finite numbers, and text that cannot hold a larger one without walking it", () => {
    expect(at('{"a":1.7976931348623157e308,"b":1e-400,"c":"1e400"}')).toBeNull();
    expect(at(`{"n":${"9".repeat(99)}e99}`)).toBeNull();
    // No three-digit exponent nor a hundred digits: not walked (the value is not even looked at).
    expect(infiniteNumberAt('{"a":1}', { a: Number.POSITIVE_INFINITY })).toBeNull();
  });
});
