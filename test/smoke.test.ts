import { env, exports } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { expect, it } from "vitest";

it("boots the worker and an object with SQLite", async () => {
  const res = await exports.default.fetch("http://x/");
  expect(await res.text()).toBe("troupe");
  const stub = env.SHEET_SHARD.getByName("smoke");
  const n = await runInDurableObject(stub, (_o, state) => state.storage.sql.exec("select 1 as n").one().n);
  expect(n).toBe(1);
  expect(env.TROUPE_TEST_MODE).toBe("on");
});
