// Starts and stops `wrangler dev` for the black-box scripts (bench, chaos).
// Only ever binds and talks to 127.0.0.1.
import { spawn } from "node:child_process";

/** Starts wrangler dev on `port` with state in `stateDir`; resolves once it answers HTTP. */
export async function startServer({ port, stateDir, verbose = false }) {
  const child = spawn("wrangler", ["dev", "--ip", "127.0.0.1", "--port", String(port), "--persist-to", stateDir, "--log-level", "warn"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
    detached: true,
  });
  if (verbose) {
    child.stdout.on("data", (d) => process.stderr.write(d));
    child.stderr.on("data", (d) => process.stderr.write(d));
  } else {
    child.stdout.resume();
    child.stderr.resume();
  }
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/`)).ok) return child;
    } catch {
      // Not listening yet.
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  stopServer(child, "SIGKILL");
  throw new Error("the local server did not start within 60 s");
}

/** Signals the server's whole process group (wrangler and its workerd). */
export function stopServer(child, signal = "SIGTERM") {
  try {
    process.kill(-child.pid, signal);
  } catch {
    // Already gone.
  }
}

/** A JSON client for the local API with the dev token. */
export function client(port) {
  const base = `http://127.0.0.1:${port}`;
  const headers = { Authorization: "Bearer dev-token", "Content-Type": "application/json" };
  return async function call(method, path, body) {
    const res = await fetch(`${base}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const json = await res.json();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  };
}
