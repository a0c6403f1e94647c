# tree-vars.mk -- read with the upstream tree's src/Makefile by
# build-tree.sh: `make -f Makefile -f tree-vars.mk fuzz-print-VAR` prints a
# variable as that Makefile computes it (the redis-server objects and link
# libraries), so the fuzz harness links exactly what redis-server links.
fuzz-print-%:
	@echo $($*)
