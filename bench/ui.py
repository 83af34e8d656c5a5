"""The web UI (S5): time from a REST post to the message in the browser's DOM, and first load.

A hub is served by uvicorn in its own process (``hub_server.py``) on a fresh data root (on
PostgreSQL a throwaway database). Debian's Chromium, driven by Playwright, signs in as the
operator and opens a group channel's page; the bench then posts into that channel over REST as
an agent member (an agent's post in a group starts no task: only the post → stream → DOM path is
timed), one post at a time, and waits for each message to be in the page.

* ``post_to_dom_p50_ms`` / ``post_to_dom_p99_ms``: from just before the bench sends ``POST
  /v1/channels/{id}/messages`` to the moment a MutationObserver in the page sees the message's
  element added (both clocks are the machine's wall clock: ``time.time_ns`` here,
  ``performance.timeOrigin + performance.now()`` in the page).
* ``first_load_ms``: the channel page with every posted message in its transcript, opened in a
  fresh browser context (empty cache, signed in): navigation start → the load event, median of
  five such loads; ``first_load_max_ms`` the slowest.

Progress goes to stderr; the last line of stdout is one JSON object with the figures.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page, async_playwright

from common import (
    compare_backends,
    conditions,
    distribution,
    load_average,
    ms,
    parse_args,
    run_main,
)
from hub_server import HubProcess, progress, temp_postgres
from search import QUERIES as SEARCH_QUERIES
from search import QUICK_QUERIES as SEARCH_QUICK_QUERIES
from search import Plan as SearchPlan
from search import section as search_section

CHROMIUM = "/usr/bin/chromium"
POSTS = 200
QUICK_POSTS = 50
LOADS = 5
WAIT_MS = 10_000
TARGETS = {"post_to_dom_p99_ms": 150.0, "first_load_ms": 500.0, "search_p50_ms": 50.0}

OBSERVE = """() => {
  window.__seen = {};
  const list = document.getElementById('transcript');
  new MutationObserver((records) => {
    const now = performance.timeOrigin + performance.now();
    for (const r of records) for (const n of r.addedNodes) {
      if (n.nodeType === 1 && n.dataset.seq) window.__seen[n.dataset.seq] = now;
    }
  }).observe(list, {childList: true});
}"""

LOAD_TIME = """() => {
  const [nav] = performance.getEntriesByType('navigation');
  return nav.loadEventEnd - nav.startTime;
}"""


async def _setup(hub: HubProcess) -> tuple[str, str]:
    """An agent member and a group channel; returns the channel id and the agent's token."""
    headers = {"Authorization": f"Bearer {hub.operator_token}"}
    async with httpx.AsyncClient(base_url=hub.url, headers=headers, timeout=30) as client:
        r = await client.post("/v1/agents", json={"id": "poster", "runtime": {"kind": "none"}})
        r.raise_for_status()
        token = r.json()["token"]
        r = await client.post(
            "/v1/channels", json={"name": "ui-bench", "kind": "group", "members": ["poster"]}
        )
        r.raise_for_status()
        return r.json()["id"], token


async def _sign_in(page: Page, url: str, token: str) -> None:
    await page.goto(f"{url}/ui/signin")
    await page.get_by_label("Token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{url}/ui/")


async def _post_to_dom(
    page: Page, url: str, channel_id: str, token: str, posts: int
) -> list[float]:
    samples: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        for i in range(posts):
            sent_ms = time.time_ns() / 1e6
            r = await client.post(
                f"/v1/channels/{channel_id}/messages", json={"content": f"bench message {i}"}
            )
            r.raise_for_status()
            seq = str(r.json()["message"]["seq"])
            seen = await page.wait_for_function(
                "(seq) => window.__seen[seq]", arg=seq, timeout=WAIT_MS
            )
            samples.append(float(await seen.json_value()) - sent_ms)
    return samples


async def measure(backend: str, quick: bool, posts: int | None) -> dict[str, Any]:
    count = posts or (QUICK_POSTS if quick else POSTS)
    load_before = load_average()
    async with contextlib.AsyncExitStack() as stack:
        database_url = None
        if backend == "postgres":
            database_url = await stack.enter_async_context(temp_postgres("parley_bench_ui_"))
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="parley-bench-ui-")))
        hub = HubProcess(home / "hub", database_url)
        stack.callback(hub.stop)
        await hub.start()
        channel_id, agent_token = await _setup(hub)
        progress(f"hub at {hub.url} ({backend}); {count} posts")
        pw = await stack.enter_async_context(async_playwright())
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        stack.push_async_callback(browser.close)
        context = await browser.new_context(viewport={"width": 1280, "height": 860})
        page = await context.new_page()
        await _sign_in(page, hub.url, hub.operator_token)
        await page.goto(f"{hub.url}/ui/channels/{channel_id}")
        # Live once the page's stream, carried by the browser's shared stream, has opened.
        await page.wait_for_selector("[sse-connect][data-live=open]", state="attached")
        await page.evaluate(OBSERVE)
        samples = await _post_to_dom(page, hub.url, channel_id, agent_token, count)
        progress(f"post → DOM: median {statistics.median(samples):.1f} ms")
        state = await context.storage_state()
        loads = []
        for _ in range(LOADS):
            fresh = await browser.new_context(storage_state=state)  # type: ignore[arg-type]
            cold = await fresh.new_page()
            await cold.goto(f"{hub.url}/ui/channels/{channel_id}", wait_until="load")
            loads.append(float(await cold.evaluate(LOAD_TIME)))
            await fresh.close()
        progress(f"first load: median {statistics.median(loads):.1f} ms")
    # The search page's one service call over 10,000 messages, as bench/search.py times it.
    plan = SearchPlan((backend,), quick, SEARCH_QUICK_QUERIES if quick else SEARCH_QUERIES)
    found = await compare_backends(
        plan,
        [search_section],
        ["search_p50_ms", "search_p99_ms"],
        per_backend=[],
        home_prefix="parley-bench-ui-search-",
        database_prefix="parley_bench_ui_search_",
    )
    progress(f"search over 10,000 messages: p50 {found['search_p50_ms']} ms")
    result: dict[str, Any] = {
        "backend": backend,
        "posts": count,
        **distribution("post_to_dom", samples),
        "first_load_ms": ms(statistics.median(loads)),
        "first_load_max_ms": ms(max(loads)),
        "search_p50_ms": found["search_p50_ms"],
        "search_p99_ms": found["search_p99_ms"],
    }
    result["targets_met"] = all(
        result[name] is not None and result[name] < limit for name, limit in TARGETS.items()
    )
    result.update(conditions(load_before))
    return result


def table(result: dict[str, Any]) -> str:
    rows = [
        ("post → DOM p50 ms", "post_to_dom_p50_ms", ""),
        ("post → DOM p90 ms", "post_to_dom_p90_ms", ""),
        ("post → DOM p99 ms", "post_to_dom_p99_ms", "< 150"),
        ("post → DOM max ms", "post_to_dom_max_ms", ""),
        ("first load (median of 5) ms", "first_load_ms", "< 500"),
        ("first load (max of 5) ms", "first_load_max_ms", ""),
        ("search over 10,000 messages p50 ms", "search_p50_ms", "< 50"),
    ]
    lines = [
        f"| figure ({result['backend']}, {result['posts']} posts) | value | target |",
        "|---|---:|---:|",
    ]
    lines += [f"| {label} | {result[key]} | {target} |" for label, key, target in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, argv, counts=[("--posts", "posts to time (default 200, 50 quick)")])
    run_main(args, lambda: measure(args.backend, args.quick, args.posts), table)


if __name__ == "__main__":
    sys.exit(main())
