"""The regression gate's parts; tools/gate.py is the command.

plugin    the pytest plugin loaded into each thunder test run (`-p gatelib.plugin`): records outcomes as JSON lines
outcomes  test ids, reading a run's JSON lines, comparing stock with overlay, the allowlist
plan      which modules the installed thunder ships, shards, and the selection key of a run
runner    one side of one unit in a subprocess, reusing complete results (--resume, --reuse-stock)
report    per-module and overall summaries, the console table, the markdown table and the ETA
"""
