import { describe, expect, it } from "vitest";
import { FatalLatch } from "./latch";

describe("FatalLatch", () => {
  it("tells its listeners once, at once when already tripped, and not those that stopped listening", () => {
    const latch = new FatalLatch();
    const heard: string[] = [];
    latch.onTrip(() => heard.push("kept"));
    const stop = latch.onTrip(() => heard.push("stopped"));
    stop();
    latch.trip(new Error("first"));
    latch.trip(new Error("second"));
    latch.onTrip((error) => heard.push(`late: ${error.message}`));
    expect(heard).toEqual(["kept", "late: first"]);
  });
});
