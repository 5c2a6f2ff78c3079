"""Hugging Face transformers' RoPE frequency functions (modeling_rope_utils.py),
written out in the same torch ops under HF's names, for the generators that need
them (make_rope_golden.py, make_block_golden.py): transformers itself is not
installed. Each returns (inv_freq [dim / 2] float32, attention_factor)."""

import math

import torch


def _compute_default_rope_parameters(base, dim):
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    return inv_freq, 1.0


def _compute_linear_scaling_rope_parameters(base, dim, factor):
    inv_freq, attention_factor = _compute_default_rope_parameters(base, dim)
    inv_freq /= factor
    return inv_freq, attention_factor


def _compute_dynamic_ntk_parameters(base, dim, factor, max_position_embeddings, seq_len):
    seq_len = seq_len if seq_len is not None and seq_len > max_position_embeddings \
        else max_position_embeddings
    base = base * ((factor * seq_len / max_position_embeddings) - (factor - 1)) ** (
        dim / (dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    return inv_freq, 1.0


def _compute_yarn_parameters(base, dim, factor, original_max_position_embeddings,
                             beta_fast=None, beta_slow=None, attention_factor=None):
    if attention_factor is None:
        # get_mscale(factor) for factor > 1.
        attention_factor = 0.1 * math.log(factor) + 1.0
    beta_fast = beta_fast or 32
    beta_slow = beta_slow or 1

    def find_correction_dim(num_rotations, dim, base, max_position_embeddings):
        return (dim * math.log(max_position_embeddings / (num_rotations * 2 * math.pi))) / (
            2 * math.log(base))

    def find_correction_range(low_rot, high_rot, dim, base, max_position_embeddings):
        low = math.floor(find_correction_dim(low_rot, dim, base, max_position_embeddings))
        high = math.ceil(find_correction_dim(high_rot, dim, base, max_position_embeddings))
        return max(low, 0), min(high, dim - 1)

    def linear_ramp_factor(min, max, dim):
        if min == max:
            max += 0.001  # Prevent singularity
        linear_func = (torch.arange(dim, dtype=torch.float32) - min) / (max - min)
        return torch.clamp(linear_func, 0, 1)

    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)
    low, high = find_correction_range(beta_fast, beta_slow, dim, base,
                                      original_max_position_embeddings)
    inv_freq_extrapolation_factor = 1 - linear_ramp_factor(low, high, dim // 2).float()
    inv_freq = (inv_freq_interpolation * (1 - inv_freq_extrapolation_factor)
                + inv_freq_extrapolation * inv_freq_extrapolation_factor)
    return inv_freq, attention_factor


def _compute_llama3_parameters(base, dim, factor, old_context_len, low_freq_factor=None,
                               high_freq_factor=None):
    inv_freq, attention_factor = _compute_default_rope_parameters(base, dim)
    low_freq_factor = 1.0 if low_freq_factor is None else low_freq_factor
    high_freq_factor = 4.0 if high_freq_factor is None else high_freq_factor
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor \
        + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    return inv_freq_llama, attention_factor
