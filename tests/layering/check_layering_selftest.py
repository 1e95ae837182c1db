#!/usr/bin/env python3
"""The layering check's own negative control: a forbidden header reached
through a chain of includes is found and the chain named; one that is not
reached is not reported."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layering as cl  # noqa: E402


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


with tempfile.TemporaryDirectory() as root:
    write(root, "clients/scrape/http_scraper.h", "#pragma once\n")
    write(root, "clients/scrape/endpoint.h", "#pragma once\n")
    write(root, "operator/trainingjob/poller.h", '#include "scrape/http_scraper.h"\n')
    write(root, "operator/trainingjob/context.h", '#include <string>\n#include "trainingjob/poller.h"\n')
    far = write(root, "operator/trainingjob/reconciler_a.cc", '#include "trainingjob/context.h"\n')
    near = write(root, "operator/trainingjob/reconciler_b.cc", '#include "scrape/endpoint.h"\n#include "missing/x.h"\n')
    graph = cl.IncludeGraph(root)
    bad = []
    cl.forbidden_reach(graph, far, {"scrape/http_scraper.h"}, root, bad)
    cl.forbidden_reach(graph, near, {"scrape/http_scraper.h"}, root, bad)
    want = ["operator/trainingjob/reconciler_a.cc: may not include scrape/http_scraper.h through "
            "trainingjob/context.h -> trainingjob/poller.h"]
    if bad != want:
        print(f"got {bad}\nwant {want}")
        sys.exit(1)
print("layering self-test: a header reached through two includes is named with its chain")
