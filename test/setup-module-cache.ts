/**
 * The test runner's own cost, cut. `@cloudflare/vitest-plugin` runs each
 * Durable Object method, alarm and fetch, and each call into the Worker's
 * entrypoint, through a wrapper that imports the Worker's main module again
 * (so that in watch mode a changed file replaces the object's class). Each
 * such import asks the vitest process over its socket to resolve the path:
 * about 6,000 round trips in export.test.ts, each JSON and compressed both
 * ways. Measured on that file, spend.test.ts and chaos-crash.test.ts, they
 * were 43 to 52% of the CPU the file used (workerd and node together).
 *
 * Here a module this isolate has imported once is answered from memory. Each
 * test file runs in an isolate of its own, so a file changed in watch mode is
 * imported afresh by the next run; no test here mocks modules. Should the
 * plugin stop exposing its runner this way, nothing changes but the time.
 */
interface ModuleRunner {
  import(specifier: string): Promise<unknown>;
}

const runner = (globalThis as { __vitest_mocker__?: { moduleRunner?: ModuleRunner } }).__vitest_mocker__?.moduleRunner;

if (runner && typeof runner.import === "function") {
  const importAfresh = runner.import.bind(runner);
  // Only what finished loading: a promise still pending belongs to the request that started it.
  const loaded = new Map<string, unknown>();
  runner.import = async (specifier) => {
    if (loaded.has(specifier)) return loaded.get(specifier);
    const namespace = await importAfresh(specifier);
    loaded.set(specifier, namespace);
    return namespace;
  };
}
