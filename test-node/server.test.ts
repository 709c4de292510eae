import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
// @ts-expect-error: a plain .mjs helper shared with the scripts
import { startServer, stopServer } from "../scripts/local-server.mjs";

const PORT = 8811;
let server: unknown;
const state = mkdtempSync(join(tmpdir(), "troupe-node-"));

beforeAll(async () => {
  server = await startServer({ port: PORT, stateDir: state });
});
afterAll(async () => {
  await stopServer(server);
  rmSync(state, { recursive: true, force: true });
});

describe("the local server (npm start's)", () => {
  it("answers on 127.0.0.1 with the demo plays", async () => {
    const res = await fetch(`http://127.0.0.1:${PORT}/v1/plays`, { headers: { Authorization: "Bearer dev-token" } });
    expect(res.status).toBe(200);
    const { plays } = (await res.json()) as { plays: { name: string }[] };
    expect(plays.map((p) => p.name)).toContain("demo-enrich");
  });
});
