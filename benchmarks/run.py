from benchmarks import bench_progress

print(bench_progress.SIZES)
