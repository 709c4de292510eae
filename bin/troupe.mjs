#!/usr/bin/env node
// The `troupe` command. It runs the CLI's TypeScript from source with Node's
// type stripping (Node >= 22.18), which `npx troupe` brings in this project
// through the `node` devDependency; there is no build step to forget.
const [major, minor] = process.versions.node.split(".").map(Number);
if (major < 22 || (major === 22 && minor < 18)) {
  process.stderr.write(
    `troupe: needs Node >= 22.18 (this is ${process.version}); run it as \`npx troupe\` in the project, which uses the Node it installs\n`,
  );
  process.exit(2);
}
const { main } = await import("../src/cli/main.ts");
const code = await main(process.argv.slice(2));
// Let stdout drain (a piped --json or export) before exiting; exiting ends a socket or prompt left open.
process.stdout.write("", () => process.exit(code));
