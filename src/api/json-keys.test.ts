import { describe, expect, it } from "vitest";
import { repeatedKeyAt } from "./json-keys.ts";

describe("repeatedKeyAt", () => {
  it("names a key given twice in one object, with the path of that object", () => {
    expect(repeatedKeyAt('{"id":"1","name":"a","id":"2"}')).toEqual({ path: [], key: "id" });
    expect(repeatedKeyAt('{"rows":[{"id":"1"},{"id":"2", "x" : 1,\n"x":2}]}')).toEqual({ path: ["rows", "1"], key: "x" });
    expect(repeatedKeyAt('[1,[2,3],{"a":{"b":1,"b":2}}]')).toEqual({ path: ["2", "a"], key: "b" });
    // Keys are compared as parsed: an escape is the character it stands for.
    expect(repeatedKeyAt('{"a":1,"\\u0061":2}')).toEqual({ path: [], key: "a" });
    expect(repeatedKeyAt('{"\\"":1,"\\u0022":2}')).toEqual({ path: [], key: '"' });
  });

  it("passes keys given once per object, however strings quote colons, commas, braces and backslashes", () => {
    expect(repeatedKeyAt('{"id":"1","sub":{"id":"2"},"list":[{"id":3},{"id":4}]}')).toBeNull();
    expect(repeatedKeyAt('{"a":"x\\":\\\\","b":"{\\"a\\":1}","c":"a:b","a\\\\":1}')).toBeNull();
    expect(repeatedKeyAt('["id","id",{"id":"id"}]')).toBeNull();
    expect(repeatedKeyAt('"just a string"')).toBeNull();
    expect(repeatedKeyAt("{}")).toBeNull();
  });
});
