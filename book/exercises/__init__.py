"""The chapters' exercises: one check per exercise, named by chapter (Stage 5's: chNN.py here).

A check calls the reader's function on small cases it builds itself, prints one verdict line in the
page's language (`lang="zh"` or `"en"`) and returns True or False. It never raises: a TODO left in
place says "not solved yet" with its hint in the page's language
(`TODO("中文提示", "English hint")`; a single hint serves both), any other error becomes "not right
yet" with the error's message. The worked solutions are in book/solutions/chapters.py.

The checks live in stage1.py (chapters 1 to 9), stage2.py (10 to 12), stage3.py (13 to 16) and
stage4.py (17 to 21), what they share in base.py; this module re-exports every one of them, so
`from book.exercises import TODO, check_ch05_split` works as it always has."""

import functools  # noqa: F401
import math  # noqa: F401

import torch  # noqa: F401
import torch.nn.functional as F  # noqa: F401

from book.exercises.base import (  # noqa: F401
    _LANG,
    TODO,
    Unsolved,
    _close,
    _on,
    _shape_problem,
    _t,
    exercise,
)
from book.exercises.stage1 import (  # noqa: F401
    _E2,
    _delta_inputs,
    _heads_variants,
    _interleaved_reference,
    _norm_case,
    _Recorded,
    check_ch01_count,
    check_ch01_short_name,
    check_ch02_nearest,
    check_ch02_own_row_wins,
    check_ch03_gated,
    check_ch03_rmsnorm,
    check_ch04_cos_sin,
    check_ch04_interleaved,
    check_ch05_causal_mask,
    check_ch05_expand_kv,
    check_ch05_norm_rope,
    check_ch05_split,
    check_ch06_conv_step,
    check_ch06_delta_step,
    check_ch06_gates,
    check_ch07_decay_matrix,
    check_ch07_prefill_then_decode,
    check_ch08_matching_width,
    check_ch08_swiglu,
    check_ch09_decoder_layer,
    check_ch09_logit_lens,
)
from book.exercises.stage2 import (  # noqa: F401
    _decodes,
    _real_tokenizer,
    _Watched,
    check_ch10_bpe,
    check_ch10_stored_form,
    check_ch11_cached_greedy,
    check_ch11_repetition,
    check_ch11_top_p,
    check_ch12_plain,
    check_ch12_printable,
    check_ch12_render,
    check_ch12_reusable,
)
from book.exercises.stage3 import (  # noqa: F401
    COPIES,
    check_ch13_decode_ceiling,
    check_ch13_ridge_batch,
    check_ch14_copies,
    check_ch14_join,
    check_ch15_conv_state,
    check_ch15_grown_capacity,
    check_ch16_head_saving,
    check_ch16_quantize,
    check_ch16_round_activations,
)
from book.exercises.stage4 import (  # noqa: F401
    _Held,
    _LiveSaved,
    check_ch17_loss_ignore,
    check_ch17_masked_perplexity,
    check_ch18_accumulate,
    check_ch18_mlp_bytes,
    check_ch18_rmsnorm_grad,
    check_ch19_bytes_per_chunk,
    check_ch19_cumsum_backward,
    check_ch19_solve_backward,
    check_ch20_answer_mask,
    check_ch20_lora_params,
    check_ch20_merge,
    check_ch21_bigram_perplexity,
    check_ch21_lr_at,
    check_ch21_param_count,
)
