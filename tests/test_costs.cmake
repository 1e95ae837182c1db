# Included by ctest after the GoogleTest binaries' discovered tests
# (tests/CMakeLists.txt): the longest of them get a COST (seconds, from a CI
# run's own timings), so a fresh tree, which has no timings of an earlier run
# to order by, starts them before the short ones and leaves none for the end.
set_tests_properties(Convergence.TinyPresetReachesEntropyFloorWithinDemoBudget PROPERTIES COST 165)
set_tests_properties(MixedPrecision.Bf16TracksF32OnTheTinyPreset PROPERTIES COST 30)
