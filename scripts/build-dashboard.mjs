// Builds the dashboard (src/dashboard) into dist/dashboard, the directory
// wrangler.toml's [assets] serves at `/`: its TypeScript bundled by esbuild
// into app.js (with the client it imports), and its static files copied.
// `npm start`, `npm test` and `npm run build` run it, and scripts/local-server.mjs
// builds it when missing; the output is not committed (a build takes well
// under a second).
import { build } from "esbuild";
import { existsSync } from "node:fs";
import { copyFile, mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "src/dashboard");
/** Must match `[assets] directory` in wrangler.toml. */
export const DASHBOARD_DIR = join(root, "dist/dashboard");

const STATIC_FILES = ["index.html", "styles.css"];

/**
 * Builds the dashboard into `outDir`, resolving once it is written. Files are
 * overwritten in place, never deleted first: a running server keeps serving.
 */
export async function buildDashboard({ outDir = DASHBOARD_DIR } = {}) {
  await mkdir(outDir, { recursive: true });
  await build({
    entryPoints: [join(source, "main.ts")],
    outfile: join(outDir, "app.js"),
    bundle: true,
    format: "esm",
    platform: "browser",
    target: ["es2022"],
    minify: true,
    sourcemap: "linked",
    // Type errors are the typecheck's job (npm run typecheck); esbuild only strips types.
    logLevel: "warning",
  });
  await Promise.all(STATIC_FILES.map((file) => copyFile(join(source, file), join(outDir, file))));
}

/**
 * Builds the dashboard unless a build is there: `wrangler dev` refuses to
 * start without the assets directory, and scripts start it directly.
 */
export async function ensureDashboard() {
  if (!existsSync(join(DASHBOARD_DIR, "index.html"))) await buildDashboard();
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  await buildDashboard();
}
