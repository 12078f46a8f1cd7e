#!/usr/bin/env python3
"""Counts test cases in the JUnit XML files under a bazel-testlogs tree and prints
'N passed, N failed, N skipped' as the last line. Exits 1 if any failed or none ran.

A gtest binary writes one <testcase> per TEST; a binary that crashed before writing its XML gets Bazel's
generated XML, whose single <testcase> carries a <failure>, so a crash counts as a failure, never as nothing.
"""
import os
import sys
import xml.etree.ElementTree as ET


def count(root_dir):
    passed = failed = skipped = 0
    for dirpath, _, files in os.walk(root_dir, followlinks=True):
        if "test.xml" not in files:
            continue
        path = os.path.join(dirpath, "test.xml")
        try:
            tree = ET.parse(path)
        except ET.ParseError as e:
            print(f"unreadable test result {path}: {e}", file=sys.stderr)
            failed += 1
            continue
        for case in tree.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif (case.find("skipped") is not None or case.get("status") == "notrun"
                  or case.get("result") == "skipped"):
                skipped += 1
            else:
                passed += 1
    return passed, failed, skipped


def main():
    root_dir = sys.argv[1] if len(sys.argv) > 1 else "bazel-testlogs"
    passed, failed, skipped = count(root_dir)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
