"""Browser envs: web tasks in Chromium driven by Playwright (MiniWoB++ and any URL task).

Modules: ``chromium`` (where Chromium runs), ``page_text`` (the page as text with stable ids),
``actions`` (the action language), ``tasks`` (task contract and URL tasks), ``miniwob``
(MiniWoB++ tasks and their registration), ``env`` (the env), ``gold`` (scripted gold policies),
``baselines`` (a random policy).
Importing this package needs the ``browser`` extra (playwright, miniwob) only when an env runs.
"""
