"""A third independent tester's 64 whole training scripts (tests/captured/adversarial3/
loops.py: course models, schedulers, checkpoints, GANs, pruning, attributes on
parameters...), each run plainly and through needle.jit in a fresh process, as the tester
ran them: every observable equal bit for bit, or needle's warning, or JitError.

By default the scripts that were silently different or crashed under needle.jit before
they were fixed, and a sample of the others; NEEDLE_TEST_ALL_SCRIPTS=1 runs all 64."""
import os
import pickle
import subprocess
import sys

import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adversarial3")
sys.path.insert(0, HERE)
import harness  # noqa: E402
import loops  # noqa: E402

FOUND_WRONG = [
    "magnitude_pruning_mask_on_parameters", "per_parameter_grad_norm_attribute_logging",
    "layerwise_lr_multiplier_on_parameters", "custom_frozen_flag_on_parameters",
    "sample_weights_attached_to_batch_tensor", "wgan_critic_weight_clipping_inside",
    "adamw_by_hand_decay_after_step", "adamw_decay_between_calls",
    "class_weighted_loss_from_counts", "label_smoothing_one_hot_numpy_labels",
    "grad_accumulation_on_param_attributes", "lookahead_slow_weights_on_parameters",
]
SAMPLE = ["mlp_resnet_course_epoch", "lm_rnn_ptb_clip_inside", "checkpoint_save_train_rollback",
          "gan_two_jitted_steps", "ema_weights_swapped_in_for_eval", "lm_lstm_course_numpy_clip"]
NAMES = list(loops.LOOPS) if os.environ.get("NEEDLE_TEST_ALL_SCRIPTS") == "1" else FOUND_WRONG + SAMPLE
#: known silently different on some hosts: with AVX-512 code (not with AVX2 code on the same
#: machine), the critic's clipped weights left pending for the other jitted step give one
#: generator loss of 32 a last-bit difference (docs/jit.md, "Known differences")
ON_AVX512 = {"wgan_critic_weight_clipping_inside"}


def _host_has_avx512() -> bool:
    from needle.runtime import jit
    return jit.host_target(1, False).vector_bytes == 64


def run(name, mode, tmp_path):
    out = tmp_path / f"{name}.{mode}.pkl"
    root = os.path.join(HERE, *[".."] * 3)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, os.path.join(HERE, "harness.py"), name, mode, str(out)], cwd=root,
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and out.exists(), p.stderr[-2000:]
    with open(out, "rb") as f:
        return pickle.load(f)


@pytest.mark.parametrize("name", NAMES)
def test_a_whole_script_is_never_silently_different_under_jit(name, tmp_path):
    plain, jit = run(name, "plain", tmp_path), run(name, "jit", tmp_path)
    assert plain["status"] == "ok", plain["error"]
    if jit["status"] == "jiterror":
        return
    assert jit["status"] == "ok", f"only the jitted run failed: {jit['error']}"
    differences = harness.equal(plain["obs"], jit["obs"], "obs") + harness.equal(plain["np_rng"], jit["np_rng"])
    if differences and name in ON_AVX512 and _host_has_avx512():
        pytest.xfail(f"a known last-bit difference with AVX-512 code (docs/jit.md): {differences[:2]}")
    assert not differences, differences[:5]  # (running plainly after a warning changes nothing either)
