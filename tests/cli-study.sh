#!/usr/bin/env bash
# placesim study end to end on a small built-in model: the table, report, CSV, SQLite and JSON it
# promises, and clear errors for bad arguments.
set -u
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

out=$("$PSIM" study zoo:mlp --cluster local:2 --algos single,round-robin --steps 2 --no-profile \
      --out "$tmp/s" --json) || fail "study exited $?"
for f in report.md results.csv results.sqlite; do [ -s "$tmp/s/$f" ] || fail "no $f"; done
echo "$out" | grep -q '"rows":\[{"graph":"mlp","algo":"single","sim_us":' || fail "json rows: $out"
echo "$out" | grep -q '"median_abs_error_pct":' || fail "json median: $out"
[ "$(wc -l <"$tmp/s/results.csv")" = 3 ] || fail "results.csv should have a header and 2 rows"
grep -q '| mlp | round-robin |' "$tmp/s/report.md" || fail "report table"
ls "$tmp/s"/mlp-round-robin.sim.json "$tmp/s"/mlp-round-robin.run.json >/dev/null || fail "traces"
if command -v sqlite3 >/dev/null; then
    n=$(sqlite3 "$tmp/s/results.sqlite" "SELECT count(*) FROM results WHERE measured_us > 0")
    [ "$n" = 2 ] || fail "results table has $n measured rows"
    n=$(sqlite3 "$tmp/s/results.sqlite" "SELECT count(DISTINCT kind) FROM runs")
    [ "$n" = 2 ] || fail "timelines of both kinds expected, got $n"
fi
"$PSIM" compare "$tmp/s/mlp-round-robin.sim.json" "$tmp/s/mlp-round-robin.run.json" >/dev/null || fail "compare"
# Each row's plan, named in --json: it carries its cluster and refers to the built-in model, so
# `sim --plan` needs no other argument and gives the row's simulated step, and `run --plan` runs it.
for a in single round-robin; do
    p="$tmp/s/mlp-$a.plan.json"
    echo "$out" | grep -q "\"plan\":\"mlp-$a.plan.json\"" || fail "json names no plan for $a: $out"
    grep -q '"source": *"zoo:mlp"' "$p" || fail "$a plan does not refer to zoo:mlp"
    sim=$("$PSIM" sim --plan "$p" --json) || fail "sim --plan $a exited $?"
    python3 -c '
import json, sys
rows = json.loads(sys.argv[1])["rows"]
row = [r for r in rows if r["algo"] == sys.argv[3]][0]
sim = json.loads(sys.argv[2])
assert abs(sim["step_time_us"] - row["sim_us"]) <= 1e-9 * row["sim_us"], (sim["step_time_us"], row["sim_us"])' \
        "$out" "$sim" "$a" || fail "sim --plan of the $a plan differs from its row: $sim"
    "$PSIM" run --plan "$p" --steps 1 >/dev/null || fail "run --plan $a exited $?"
done
# Cost sources (issue 20 item 21): no DB, so every node of mlp is estimated or free, per row in
# --json and per op in the simulated trace.
[ "$(echo "$out" | grep -o '"cost_sources":{"measured":0,"estimated":7,"annotated":0,"free":7}' | wc -l)" = 2 ] ||
    fail "cost sources per row: $out"
python3 -c '
import json, sys
ops = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("cat") == "op"]
tags = sorted(e["args"].get("cost_source", "") for e in ops if "_send_" not in e["name"] and "_recv_" not in e["name"])
assert tags == ["estimated"] * 7, tags  # the free ones (weights, input) are not in the step' "$tmp/s/mlp-round-robin.sim.json" || fail "trace cost tags"

# Decision quality (issue 14): per graph the plan chosen from the simulations alone (lowest
# simulated step; within tie_pct of it, fewer devices then fewer transfers), its measured step, the
# best measured one and the regret, in --json, the text and report.md.
out=$("$PSIM" study zoo:mlp zoo:cnn --cluster local:2 --algos single,round-robin,heft --steps 2 --no-profile \
      --out "$tmp/c" --json) || fail "study for choices exited $?"
echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
rows, ch = d["rows"], d["choices"]
assert [c["graph"] for c in ch] == ["mlp", "cnn"], ch
for c in ch:
    rs = [r for r in rows if r["graph"] == c["graph"] and "error" not in r]
    fast = min(r["sim_us"] for r in rs)
    tied = [r for r in rs if r["sim_us"] <= fast * (1 + d["tie_pct"] / 100)]
    pick = [r for r in rs if r["algo"] == c["chosen"]][0]
    assert pick in tied, (c, tied)
    assert c["simpler"] == (pick["sim_us"] != fast), c
    # A placement made by several algorithms is one plan, measured as the mean of its rows.
    def us(r):
        same = [x["measured_us"] for x in rs if x["placement"] == r["placement"]]
        return sum(same) / len(same)
    best = min(rs, key=us)
    assert abs(c["best_measured_us"] - us(best)) < 1e-9, c
    assert abs(c["chosen_measured_us"] - us(pick)) < 1e-9, c
    assert abs(c["regret_pct"] - 100 * (us(pick) / us(best) - 1)) < 1e-9, c
    assert c["regret_pct"] >= 0, c
    assert abs(c["single_measured_us"] - us([r for r in rs if r["algo"] == "single"][0])) < 1e-9, c
assert d["max_regret_pct"] == max(c["regret_pct"] for c in ch)
assert all(len(r["placement"]) == 16 for r in rows if "error" not in r), rows
# Against single: chosen measured / single measured - 1, the worst, and the count over 2%.
for c in ch:
    assert abs(c["vs_single_pct"] - 100 * (c["chosen_measured_us"] / c["single_measured_us"] - 1)) < 1e-9, c
assert d["max_vs_single_pct"] == max(0, max(c["vs_single_pct"] for c in ch)), d
assert d["choices_slower_than_single"] == sum(c["vs_single_pct"] > 2 for c in ch), d
# Error per algorithm (mean signed too), and on one device apart from several devices.
ok = [r for r in rows if "error" not in r]
by = {e.get("algo", e.get("devices")): e for e in d["errors"]}
assert set(by) == {"single", "round-robin", "heft", "one", "several"}, by
for a in ("single", "round-robin", "heft"):
    rs = [r["error_pct"] for r in ok if r["algo"] == a]
    assert by[a]["runs"] == len(rs) and abs(by[a]["mean_signed_error_pct"] - sum(rs) / len(rs)) < 1e-9, by[a]
    assert by[a]["max_abs_error_pct"] == max(abs(x) for x in rs), by[a]
assert by["one"]["runs"] + by["several"]["runs"] == len(ok), by
assert by["one"]["runs"] >= 2, by  # single on each graph at least
' || fail "choices: $out"
grep -q "^## Choices" "$tmp/c/report.md" || fail "report.md has no choices"
grep -q "^## Error by algorithm and by devices used" "$tmp/c/report.md" || fail "report.md has no error groups"
if command -v gnuplot >/dev/null; then [ -s "$tmp/c/accuracy.png" ] || fail "no accuracy.png"; fi
"$PSIM" place zoo:cnn --cluster local:2 --algo all --budget-ms 20 --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
ok = [r for r in d["results"] if "error" not in r]
fast = min(r["makespan_us"] for r in ok)
pick = [r for r in ok if r["algo"] == d["chosen"]][0]
assert d["tie_pct"] == 1.5, d  # the simulator error bound (tools/cli.h)
assert pick["makespan_us"] <= fast * (1 + d["tie_pct"] / 100), d
assert d["simpler"] == (pick["makespan_us"] != fast), d' || fail "place --algo all choice"

# Names (issue 14): graphs whose models share a name get rows and files of their own. Two
# exports named "torch_jit" take their files' stems; two files both named net.json, whose model
# is "net", become net and net-2.
"$PSIM" export zoo:mlp --format json --out "$tmp/m.json" || fail "export mlp"
mkdir -p "$tmp/a" "$tmp/b"
sed 's/"name": "mlp"/"name": "torch_jit"/' "$tmp/m.json" >"$tmp/resnet_x.json"
sed 's/"name": "mlp"/"name": "torch_jit"/' "$tmp/m.json" >"$tmp/vgg_x.json"
sed 's/"name": "mlp"/"name": "net"/' "$tmp/m.json" >"$tmp/a/net.json"
sed 's/"name": "mlp"/"name": "net"/' "$tmp/m.json" >"$tmp/b/net.json"
grep -q '"name": "torch_jit"' "$tmp/resnet_x.json" || fail "the fixture did not rename the model"
"$PSIM" inspect "$tmp/resnet_x.json" | grep -q '^graph *resnet_x$' || fail "a generic name is not the file's stem"
"$PSIM" study "$tmp/resnet_x.json" "$tmp/vgg_x.json" "$tmp/a/net.json" "$tmp/b/net.json" --cluster local:1 \
    --algos single --steps 1 --no-profile --out "$tmp/n" >/dev/null 2>&1 || fail "study of same-named graphs"
for g in resnet_x vgg_x net net-2; do
    grep -q "^$g,single," "$tmp/n/results.csv" || fail "no row for $g: $(cat "$tmp/n/results.csv")"
    [ -s "$tmp/n/$g-single.sim.json" ] || fail "no trace of its own for $g"
done
[ "$(wc -l <"$tmp/n/results.csv")" = 5 ] || fail "results.csv should have a header and 4 rows"

expect2() {
    "$@" >"$tmp/o" 2>"$tmp/e"; rc=$?
    [ $rc = 2 ] || fail "exit $rc (expected 2): $*"
    [ "$(wc -l <"$tmp/e")" = 1 ] || fail "expected one error line: $(cat "$tmp/e")"
}
expect2 "$PSIM" study zoo:mlp --algos heft,nosuch --out "$tmp/x"
expect2 "$PSIM" study zoo:mlp --steps 0 --out "$tmp/x"
expect2 "$PSIM" study zoo:mlp --steps 2 --rounds 3 --out "$tmp/x"
expect2 "$PSIM" study zoo:mlp --profile-rounds 0 --out "$tmp/x"
# --feed as run takes it (tools/feeds.c): bad values and names no graph has are exit 2 naming it.
expect2 "$PSIM" study zoo:mlp --feed bogus --out "$tmp/x"
grep -q -- "--feed" "$tmp/e" || fail "the --feed error does not name the flag: $(cat "$tmp/e")"
expect2 "$PSIM" study zoo:mlp --feed nope=ones --out "$tmp/x"
grep -q "nope" "$tmp/e" || fail "the --feed error does not name the input: $(cat "$tmp/e")"
"$PSIM" study zoo:mlp --cluster local:1 --algos single --steps 1 --no-profile --feed zeros \
    --feed input=ramp --out "$tmp/feed" > /dev/null 2> "$tmp/e" || fail "study --feed: $(cat "$tmp/e")"
# Rounds: every step of every algorithm is measured (min <= median <= max, 3 rounds of 1).
out=$("$PSIM" study zoo:mlp --cluster local:2 --algos single,heft --steps 3 --rounds 3 --no-profile \
      --out "$tmp/r" --json) || fail "study --rounds exited $?"
grep -q 'in 3 rounds' "$tmp/r/report.md" || fail "report does not say the rounds"
# Profiling: the kernels are profiled again between the measured rounds and the plans simulated
# again with those rows; the simulation at placement is kept beside it. With --no-refresh the
# two are the same.
out=$("$PSIM" study zoo:mlp --cluster local:2 --algos single,heft --steps 2 --profile-budget-ms 5 \
      --profile-rounds 4 --out "$tmp/p" --json 2>"$tmp/p.err") || fail "study with profiling exited $?: $(cat "$tmp/p.err")"
echo "$out" | grep -q '"placed_sim_us":' || fail "json has no placed_sim_us: $out"
echo "$out" | grep -q '"placed_median_abs_error_pct":' || fail "json has no placed median: $out"
grep -q 'profiled again in passes between its measured rounds' "$tmp/p/report.md" || fail "report does not say the refresh"
n=$(sqlite3 "$tmp/p/costs.db" "SELECT count(*) FROM kernels" 2>/dev/null || echo skip)
[ "$n" = skip ] || [ "$n" -gt 0 ] || fail "no kernel rows after profiling"
# mlp runs whole: its rows are in-situ ones (issue 14), with the devices' dispatch gaps; with
# --no-in-situ a new DB gets kernel rows only.
if command -v sqlite3 >/dev/null; then
    [ "$(sqlite3 "$tmp/p/costs.db" "SELECT count(*) FROM kernels WHERE method = 'insitu'")" -gt 0 ] ||
        fail "no in-situ rows after study"
    [ "$(sqlite3 "$tmp/p/costs.db" "SELECT count(*) FROM calibration WHERE kind = 'dispatch_us'")" -gt 0 ] ||
        fail "no dispatch_us after study"
    # The links between the two CPU devices, their reclaim curves (5 sizes by an op and by a copy,
    # and by an op after 4 distances), cold-block curves and hops were timed again
    # in a pass before each of the rounds (two: --steps 2), pooled (psim_link_session_*).
    grep -q 'links pass (round 2 of 2)' "$tmp/p.err" || fail "no links pass before each round: $(cat "$tmp/p.err")"
    [ "$(sqlite3 "$tmp/p/costs.db" "SELECT count(*) FROM calibration WHERE detail LIKE '%over 2 pass(es)%'
        AND (kind LIKE 'reclaim%' OR kind LIKE 'cold%' OR kind IN ('send_us', 'handoff_us'))")" = \
      $((2 * (10 + 20 + 5 + 2))) ] || fail "the refreshed calibrations are not pooled over the rounds"
    "$PSIM" study zoo:mlp --cluster local:2 --algos single --steps 2 --profile-budget-ms 5 --profile-rounds 4 \
        --no-in-situ --out "$tmp/k" >/dev/null 2>&1 || fail "study --no-in-situ"
    [ "$(sqlite3 "$tmp/k/costs.db" "SELECT count(*) FROM kernels WHERE method = 'insitu'")" = 0 ] ||
        fail "--no-in-situ wrote in-situ rows"
fi
out=$("$PSIM" study zoo:mlp --cluster local:2 --algos single --steps 2 --no-refresh --out "$tmp/p" --json) ||
    fail "study --no-refresh exited $?"
python3 -c 'import json,sys; r=json.loads(sys.argv[1])["rows"][0]; sys.exit(r["sim_us"] != r["placed_sim_us"])' "$out" ||
    fail "--no-refresh: sim_us differs from placed_sim_us: $out"
grep -q 'profiled again' "$tmp/p/report.md" && fail "--no-refresh report says the refresh"
expect2 "$PSIM" study "$tmp/missing.onnx" --out "$tmp/x"
echo "not a db" >"$tmp/bad.db"
expect2 "$PSIM" study zoo:mlp --db "$tmp/bad.db" --no-profile --out "$tmp/x"
# Outputs (issue 20, item 13): a study that fails leaves the last study's files as they were
# (results.sqlite was deleted before the cost DB was even opened), --out may create its folder
# but not the folder's parent, and nothing temporary is left behind.
cp "$tmp/s/results.sqlite" "$tmp/before.sqlite"
expect2 "$PSIM" study zoo:mlp --db "$tmp/bad.db" --no-profile --out "$tmp/s"
cmp -s "$tmp/s/results.sqlite" "$tmp/before.sqlite" || fail "a failed study changed results.sqlite"
expect2 "$PSIM" study zoo:mlp --no-profile --out "$tmp/nowhere/s"
grep -q "$tmp/nowhere" "$tmp/e" || fail "missing parent not named: $(cat "$tmp/e")"
[ -e "$tmp/nowhere" ] && fail "the parent of --out was created"
ls -a "$tmp/s" "$tmp/p" | grep -q '^\.placesim-' && fail "temporary files left: $(ls -a "$tmp/s")"
# Empty lists are usage errors.
expect2 "$PSIM" study zoo:mlp --algos "" --out "$tmp/x"
expect2 "$PSIM" study zoo:mlp --algos "single,," --out "$tmp/x"
expect2 "$PSIM" study zoo:mlp --profile-budget-ms 1e99 --out "$tmp/x"
[ -e "$tmp/x" ] && fail "a study that failed its flags created --out"

# Leaks (item 15): the paths from g_find_program_in_path were never freed. Under valgrind when
# it is installed; a sanitizer build cannot run under it, and its LeakSanitizer checks every
# study above instead.
if command -v valgrind >/dev/null && command -v gnuplot >/dev/null && ! grep -qa __asan_init "$PSIM"; then
    # Judged on the leak summary, not valgrind's exit code: with the CUDA runtime linked in,
    # ld.so's own dlopen path reports invalid reads (glibc's vectorised strncmp) that are not ours.
    valgrind --leak-check=full "$PSIM" study zoo:mlp --cluster local:1 --algos single --steps 1 \
        --no-profile --out "$tmp/v" >/dev/null 2>"$tmp/vg.txt" || fail "study under valgrind failed"
    grep -q "definitely lost: 0 bytes\|All heap blocks were freed" "$tmp/vg.txt" ||
        fail "study leaks: $(grep -A6 'definitely lost in' "$tmp/vg.txt" | head -20)"
fi
# The noise floor: mlp is a chain, so on one device the algorithms make the same placement (the
# weights' order may differ); the measured steps' spread of the plans that are the same is
# reported as the measurements' own noise.
out=$("$PSIM" study zoo:mlp --cluster local:1 --algos single,heft,greedy --steps 3 --rounds 3 --no-profile \
      --out "$tmp/noise" --json) || fail "study for the noise floor exited $?"
echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
n = d["noise_floor"]
ms = [r["measured_us"] for r in d["rows"]]
import itertools
assert n["groups"] == 1, n  # (one group: the plans that are the same placement and order)
subsets = [c for k in (2, 3) for c in itertools.combinations(ms, k)]
assert any(abs(n["max_spread_pct"] - 100 * (max(c) / min(c) - 1)) < 1e-9 for c in subsets), (n, ms)
assert n["median_spread_pct"] == n["max_spread_pct"], n
' || fail "noise floor: $out"
grep -q "Noise floor" "$tmp/noise/report.md" || fail "report.md has no noise floor"
echo "cli-study: ok"
