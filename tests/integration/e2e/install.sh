#!/usr/bin/env bash
# Installs the e2e tests' pinned npm packages (package-lock.json) unless every
# dependency of package.json is already there at its pinned version. ctest
# runs it once, as the setup of the e2e fixture, before the tests that use the
# packages: `npm ci` deletes node_modules first, so two of them at once, or
# one under a running test, would break each other. The scripts call it too
# when run by hand. Without the npm registry the clients cannot run: exit 77
# (ctest's SKIP_RETURN_CODE), not a pass.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
installed() {
  node -e '
    const fs = require("fs");
    const deps = JSON.parse(fs.readFileSync("package.json", "utf8")).dependencies;
    for (const [name, version] of Object.entries(deps)) {
      const p = `node_modules/${name}/package.json`;
      if (!fs.existsSync(p) || JSON.parse(fs.readFileSync(p, "utf8")).version !== version) process.exit(1);
    }'
}
installed && exit 0
if ! timeout 300 npm ci --no-audit --no-fund >/dev/null 2>&1 || ! installed; then
  echo "e2e: npm ci failed (no npm registry?): skipped"
  exit 77
fi
