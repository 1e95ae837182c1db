#!/usr/bin/env bash
# Every charts/weft/dashboards/*.json as Grafana defines a dashboard: type-
# checked by TypeScript against the Dashboard, Panel and RowPanel types of
# Grafana's own @grafana/schema package (npm), with excess properties
# refused, so an unknown field, a wrong type or a value outside an enum
# (units aside: a unit is any string there) fails here, not in a user's
# Grafana. Each panel is checked as Panel or RowPanel on its own (in the
# dashboard's panels array the union weakens the check). Prometheus's query
# fields (expr, legendFormat, ...) are declared as Grafana's PromQuery adds
# them to DataQuery, and an annotation's step and titleFormat as its
# Prometheus annotation editor keeps them beside the target. The packages are fetched once into ~/.cache/weft.
# Exit 77 (skip) without npm.
set -euo pipefail
SRC=${1:?usage: grafana_schema_check.sh WEFT_SOURCE_DIR}
SCHEMA=13.2.3 TS=5.9.3
CACHE=${WEFT_GRAFANA_SCHEMA_CACHE:-$HOME/.cache/weft/grafana-schema-$SCHEMA-ts-$TS}
command -v npm >/dev/null || { echo "SKIP: npm not found (apt-get install npm)"; exit 77; }
if [ ! -x "$CACHE/node_modules/.bin/tsc" ] || [ ! -d "$CACHE/node_modules/@grafana/schema" ]; then
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock"
  flock 9
  if [ ! -x "$CACHE/node_modules/.bin/tsc" ] || [ ! -d "$CACHE/node_modules/@grafana/schema" ]; then
    (cd "$CACHE" && echo '{"private": true}' > package.json &&
      npm install --silent --no-audit --no-fund "typescript@$TS" "@grafana/schema@$SCHEMA" >/dev/null) \
      || { echo "FAIL: npm install typescript@$TS @grafana/schema@$SCHEMA" >&2; exit 1; }
  fi
fi
W=$(mktemp -d "$CACHE/check.XXXXXX")  # beside node_modules, where tsc resolves the package
trap 'rm -rf "$W"' EXIT
n=0
for dash in "$SRC"/charts/weft/dashboards/*.json; do
  name=$(basename "$dash" .json)
  /usr/bin/python3 - "$dash" > "$W/$name.ts" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
out = ['import type { Dashboard, Panel, RowPanel } from "@grafana/schema";',
       'declare module "@grafana/schema" {',
       '  interface DataQuery { expr?: string; legendFormat?: string; step?: string; titleFormat?: string;',
       '    interval?: string; instant?: boolean; range?: boolean; format?: string; exemplar?: boolean; }',
       '  interface AnnotationQuery<TQuery extends DataQuery = DataQuery> { step?: string; titleFormat?: string; }',
       '}']
def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))
for i, p in enumerate(panels(d.get("panels", []))):
    kind = "RowPanel" if p.get("type") == "row" else "Panel"
    out.append(f"export const panel{i}: {kind} = {json.dumps(p, indent=2)};")
out.append(f"export const dashboard: Dashboard = {json.dumps(d, indent=2)};")
print("\n".join(out))
PY
  n=$((n + 1))
done
out=$(cd "$W" && "$CACHE/node_modules/.bin/tsc" --noEmit --strict --module nodenext --moduleResolution nodenext \
        --skipLibCheck ./*.ts 2>&1) || { echo "FAIL: a dashboard is not what @grafana/schema $SCHEMA defines:"; echo "$out"; exit 1; }
echo "PASS: $n dashboard(s) type-check against @grafana/schema $SCHEMA (TypeScript $TS)"
