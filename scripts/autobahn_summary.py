"""Summarises an Autobahn|Testsuite index.json: cases per section and
behaviour, and every case that did not pass. Exits 1 when any case's
behaviour (or close behaviour) is other than OK, NON-STRICT or
INFORMATIONAL."""

import collections
import json
import sys

PASSING = {"OK", "NON-STRICT", "INFORMATIONAL"}


def main(path):
    with open(path) as f:
        index = json.load(f)
    failed = []
    by_section = collections.OrderedDict()
    for agent, cases in index.items():
        for case, result in sorted(cases.items(), key=lambda kv: [int(p) for p in kv[0].split(".")]):
            section = case.split(".")[0]
            behaviour = result["behavior"]
            close = result.get("behaviorClose", "OK")
            counts = by_section.setdefault(section, collections.Counter())
            counts[behaviour] += 1
            if behaviour not in PASSING or close not in PASSING:
                failed.append((agent, case, behaviour, close))
    total = collections.Counter()
    print("| section | cases | OK | NON-STRICT | INFORMATIONAL | other |")
    print("|---|---|---|---|---|---|")
    for section, counts in by_section.items():
        total.update(counts)
        other = sum(n for b, n in counts.items() if b not in PASSING)
        print(
            f"| {section} | {sum(counts.values())} | {counts['OK']} | {counts['NON-STRICT']} "
            f"| {counts['INFORMATIONAL']} | {other} |"
        )
    other = sum(n for b, n in total.items() if b not in PASSING)
    print(
        f"| all | {sum(total.values())} | {total['OK']} | {total['NON-STRICT']} "
        f"| {total['INFORMATIONAL']} | {other} |"
    )
    for agent, case, behaviour, close in failed:
        print(f"FAILED {agent} {case}: behaviour {behaviour}, close {close}")
    if not by_section:
        print("autobahn: no case ran", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
