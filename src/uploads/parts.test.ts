import { describe, expect, it } from "vitest";
import { MIN_PART_BYTES } from "./limits";
import { checkParts } from "./parts";

const MiB5 = MIN_PART_BYTES;
const parts = (...sizes: Array<[number, number]>) => sizes.map(([part, bytes]) => ({ part, bytes, etag: `e${part}` }));

describe("checkParts", () => {
  it("accepts equal parts of at least 5 MiB and a smaller last one, or one part of any size", () => {
    expect(() => checkParts(parts([1, MiB5], [2, MiB5], [3, 10]))).not.toThrow();
    expect(() => checkParts(parts([1, 10]))).not.toThrow();
    expect(() => checkParts(parts([1, MiB5 + 1], [2, MiB5 + 1]))).not.toThrow();
  });

  it("names the missing part", () => {
    expect(() => checkParts([])).toThrow(expect.objectContaining({ code: "upload_parts_missing" }));
    expect(() => checkParts(parts([1, MiB5], [2, MiB5], [4, 1], [5, 1]))).toThrow(
      expect.objectContaining({
        code: "upload_parts_missing",
        message: expect.stringContaining("part 3 is missing (parts received: 1-2, 4-5)"),
      }),
    );
  });

  it("names a part under 5 MiB that is not the last", () => {
    expect(() => checkParts(parts([1, MiB5], [2, MiB5 - 1], [3, 1]))).toThrow(
      expect.objectContaining({ code: "upload_part_too_small", httpStatus: 400, details: { part: 2, bytes: MiB5 - 1, minBytes: MiB5 } }),
    );
  });

  it("names a part of another size than the first, and a last part larger than the others", () => {
    expect(() => checkParts(parts([1, MiB5], [2, MiB5 + 1], [3, 1]))).toThrow(
      expect.objectContaining({ code: "upload_parts_uneven", details: expect.objectContaining({ part: 2 }) }),
    );
    expect(() => checkParts(parts([1, MiB5], [2, MiB5 + 1]))).toThrow(
      expect.objectContaining({ code: "upload_parts_uneven", details: expect.objectContaining({ part: 2 }) }),
    );
  });
});
