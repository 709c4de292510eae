/**
 * A Chromium for the browser tests: Debian's package, never a browser
 * download. Found at CHROMIUM_PATH or the Debian paths; where none is there
 * and apt-get can run (as root, like CI), Debian's `chromium` is installed.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";

/** The browser's path, or why none could be had. */
export type ChromiumLookup = { path: string } | { missing: string };

const CANDIDATES = ["/usr/bin/chromium", "/usr/bin/chromium-browser"];

/** The flags every browser test launches with: headless, no sandbox (root in CI), nothing talking to the network but the page. */
export const CHROMIUM_FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

function found(): string | null {
  const fromEnv = process.env.CHROMIUM_PATH;
  if (fromEnv && existsSync(fromEnv)) return fromEnv;
  return CANDIDATES.find((path) => existsSync(path)) ?? null;
}

function run(command: string, args: string[], timeoutMs: number): string | null {
  const result = spawnSync(command, args, {
    stdio: ["ignore", "ignore", "pipe"],
    encoding: "utf8",
    timeout: timeoutMs,
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
  if (result.error) return `${command} ${args.join(" ")}: ${result.error.message}`;
  if (result.status !== 0)
    return `${command} ${args.join(" ")} exited ${result.status}: ${result.stderr.trim().split("\n").slice(-3).join(" / ")}`;
  return null;
}

/**
 * Finds Chromium, installing Debian's package when it is missing and this
 * process may (root, apt-get present). Blocks while apt-get runs (minutes at
 * most; bounded by timeouts).
 */
export function findOrInstallChromium(): ChromiumLookup {
  const path = found();
  if (path) return { path };
  if (process.platform !== "linux" || !existsSync("/usr/bin/apt-get"))
    return { missing: "no /usr/bin/chromium, and no apt-get to install Debian's chromium package" };
  if (process.getuid?.() !== 0)
    return { missing: "no /usr/bin/chromium, and installing Debian's chromium package needs root (run: apt-get install -y chromium)" };
  const failure = run("apt-get", ["update"], 5 * 60_000) ?? run("apt-get", ["install", "-y", "chromium"], 10 * 60_000);
  if (failure) return { missing: `installing Debian's chromium failed: ${failure}` };
  const installed = found();
  return installed ? { path: installed } : { missing: "apt-get installed chromium, yet no chromium binary was found at /usr/bin/chromium" };
}
