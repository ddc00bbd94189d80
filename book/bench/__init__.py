"""The benchmark's measuring; scripts/bench.py is its command line, book/bench_report.py its
report. checkpoints.py: what it runs on; machine.py: the machine's limits; systems.py: the systems
side by side; steps.py: Stage 3's steps one by one."""
