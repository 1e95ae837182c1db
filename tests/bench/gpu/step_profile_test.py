#!/usr/bin/env python3
"""CPU test of step_profile.py's report parsing (the profile itself needs a GPU).

Nsight Compute's --csv log is read the way it really prints (==PROF== lines
before the table, values with thousands separators), and kernel names of a
real weft step map to the parts the report groups them by.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_profile  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(i, name, ns):
    return (f'"{i}","773","weft-worker","127.0.0.1","{name}","1","17","(256, 1, 1)","(4096, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","ns","{ns}"')


class NcuLog(unittest.TestCase):
    def test_sums_per_kernel_with_thousands_separators(self):
        rope = "void weft::<unnamed>::rope_kernel<__nv_bfloat16>(T1 *, const T1 *, const float2 *, long)"
        gemm = "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT"
        text = "\n".join(["==PROF== Connected to process 773 (/work/.gpu/bin/weft-worker)",
                          "==PROF== Disconnected from process 773", HEADER,
                          row(0, rope, "15,040"), row(1, gemm, "1,230,500"), row(2, rope, "960")])
        got = {name: (t, n) for name, t, n in step_profile.ncu_kernels(text)}
        self.assertEqual(got, {rope: (16000.0, 2), gemm: (1230500.0, 1)})

    def test_other_metrics_are_ignored(self):
        text = "\n".join([HEADER, row(0, "k", "5").replace("gpu__time_duration.sum", "dram__bytes.sum")])
        self.assertEqual(step_profile.ncu_kernels(text), [])


class Kinds(unittest.TestCase):
    def test_a_real_steps_kernels(self):
        cases = {
            "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64": "attention (cuDNN)",
            "void weft::<unnamed>::attention_fwd_kernel(float *)": "attention (SIMT)",
            "nvjet_sm90_tss_96x128_64x6_2x1_v_badd_NTN": "matmul (cuBLASLt)",
            "void cublasLt::splitKreduce_kernel<32, 16, int, float>": "matmul (cuBLASLt)",
            "void weft::<unnamed>::ce_bwd_kernel<__nv_bfloat16, 1>(T1 *)": "cross-entropy",
            "weft::<unnamed>::ce_sum_kernel(const float *, long, double *)": "cross-entropy",
            "void weft::<unnamed>::add_acc_kernel<__nv_bfloat16, __nv_bfloat16>(T1 *)": "other",
            "void weft::<unnamed>::rmsnorm_dx_kernel<__nv_bfloat16, 1, 1>(T1 *)": "rmsnorm",
            "void weft::<unnamed>::swiglu_fwd_kernel<__nv_bfloat16, 1>(T1 *)": "swiglu / activations",
            "void weft::<unnamed>::rope_kernel<float>(T1 *)": "rope",
            "weft::<unnamed>::adamw_kernel(float *, const float *)": "optimizer",
            "void weft::<unnamed>::cast_kernel<__nv_bfloat16, float>(T1 *)": "casts / copies",
        }
        for name, kind in cases.items():
            with self.subTest(name=name):
                self.assertEqual(step_profile.kind_of(name), kind)


if __name__ == "__main__":
    unittest.main()
