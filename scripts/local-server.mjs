// Starts and stops `wrangler dev` for the black-box scripts (bench, chaos).
// Only ever binds and talks to 127.0.0.1.
import { spawn } from "node:child_process";
import { ensureDashboard } from "./build-dashboard.mjs";

/**
 * Starts wrangler dev on `port` with state in `stateDir`, for the Worker of `config` (default: Troupe's
 * wrangler.toml); resolves once it answers HTTP. `inspectorPort` puts its devtools inspector there
 * (on 127.0.0.1; wrangler's default is 9229).
 */
export async function startServer({ port, stateDir, verbose = false, config = null, inspectorPort = null }) {
  if (config === null) await ensureDashboard();
  await untilPortFree(port);
  const args = ["dev", ...(config === null ? [] : ["--config", config]), "--ip", "127.0.0.1", "--port", String(port)];
  if (inspectorPort !== null) args.push("--inspector-ip", "127.0.0.1", "--inspector-port", String(inspectorPort));
  const child = spawn("wrangler", [...args, "--persist-to", stateDir, "--log-level", "warn"], {
    stdio: ["ignore", "pipe", "pipe"],
    // wrangler dev's local observability streams a trace of every invocation to a collector in the same
    // workerd: it halved a 0 ms run's rows/s and grew the server's memory (README, "Benchmarks").
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", X_LOCAL_OBSERVABILITY: "false" },
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
  await stopServer(child, "SIGKILL");
  throw new Error("the local server did not start within 60 s");
}

/**
 * Stops the server's whole process group (wrangler and its workerd): the given
 * signal first, then SIGKILL if it has not exited within `graceMs`. Resolves
 * once the process is gone, so the port and the state directory are free.
 */
export async function stopServer(child, signal = "SIGTERM", graceMs = 5_000) {
  const exited = child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((r) => child.once("exit", r));
  const kill = (sig) => {
    try {
      process.kill(-child.pid, sig);
    } catch {
      // The group is already gone.
    }
  };
  kill(signal);
  const timer = setTimeout(() => kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
  // workerd may outlive wrangler briefly: make sure nothing of the group is left.
  kill("SIGKILL");
}

async function answers(port) {
  try {
    await fetch(`http://127.0.0.1:${port}/`);
    return true;
  } catch {
    // Connection refused: the port is free.
    return false;
  }
}

/**
 * Waits until nothing answers on the port: a server still shutting down would
 * otherwise answer for ours, on its old state.
 */
async function untilPortFree(port, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (await answers(port)) {
    if (Date.now() > deadline) throw new Error(`something still listens on 127.0.0.1:${port}; stop it or set another port`);
    await new Promise((r) => setTimeout(r, 200));
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
