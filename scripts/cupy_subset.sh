# CuPy v14.2.0's 18-file subset (paths under cupy-tests/) and the marks its checks leave
# out: sourced by the device scripts, which time it against plain pytest.
C=tests/cupy_tests/cuda_tests
K=tests/cupy_tests/core_tests
SUBSET=($C/test_device.py $C/test_driver.py $C/test_runtime.py $C/test_stream.py
        $C/test_pinned_memory.py $C/test_memory_hook.py $C/test_memory.py
        $C/test_compiler_cache.py $C/test_graph.py $K/test_iter.py $K/test_flags.py
        $K/test_ndarray_conversion.py $K/test_scan.py $K/test_carray.py $K/test_include.py
        $K/test_core.py $K/test_internal.py tests/cupy_tests/random_tests/test_bit_generator.py)
MARK="not slow and not multi_gpu"
