"""The cases of ONNX's backend test runner that Kiln does not pass, grouped by reason.

Derived from actual runs of tests/python/test_onnx_backend.py (ONNX 1.12's cases; see that file).
A group whose `raises` names a class of kiln.errors is still run, as a strict xfail that must raise
exactly that error: when Kiln gains the feature the case XPASSes and the suite fails until it is
removed here, and a case that starts failing some other way is reported too. A group with
`raises=None` is not run at all (its data cannot be matched or needs the network). Names are the
runner's case names without the device suffix (`_cpu`).

The reasons for skipped cases are the same as in tools/conformance/case_runner.cpp, which runs the
node cases from C++.
"""
from dataclasses import dataclass
from typing import Optional, Tuple


@dataclass(frozen=True)
class Group:
    reason: str
    raises: Optional[str]  # a class name in kiln.errors, or None: skip without running
    cases: Tuple[str, ...]


def unsupported(reason, *cases):
    return Group(reason, "Unsupported", cases)


GROUPS = (
    # --- Not run --------------------------------------------------------------------------------
    Group("real-model case: ONNX's runner downloads the model's weights from the network, which "
          "tests may not use (the models are covered by Kiln's own zoo tests)", None, (
              "test_bvlc_alexnet", "test_densenet121", "test_inception_v1", "test_inception_v2",
              "test_resnet50", "test_shufflenet", "test_squeezenet", "test_vgg19", "test_zfnet512")),
    Group("the expected mask comes from numpy's random generator, which Kiln does not reproduce "
          "(Kiln's masks come from its own seeded generator)", None, (
              "test_training_dropout", "test_training_dropout_default",
              "test_training_dropout_default_mask", "test_training_dropout_mask")),
    Group("deliberate difference: Kiln updates running_var with the unbiased batch variance, as "
          "PyTorch (and cuDNN) do, where ONNX's reference uses the population variance (Y and "
          "running_mean match; see src/kernels/cpu/norm.cpp)", None, (
              "test_batchnorm_epsilon_training_mode", "test_batchnorm_example_training_mode")),
    Group("wrong test data in ONNX 1.12: the generator computes the expected outputs with epsilon = "
          "1e-2 but the Adam node omits the attribute, so the schema default applies "
          "(onnx/onnx#7749; with epsilon = 1e-2 added the case passes)", None, ("test_adam_multiple",)),
    Group("wrong test data in ONNX 1.12: the data feeds 'like' with shape [1] but the model "
          "declares [3, 4]", None, (
              "test_castlike_BFLOAT16_to_FLOAT", "test_castlike_BFLOAT16_to_FLOAT_expanded",
              "test_castlike_FLOAT_to_BFLOAT16", "test_castlike_FLOAT_to_BFLOAT16_expanded")),
    Group("wrong test data in ONNX 1.12: the expected data truncates float to bfloat16; Kiln rounds "
          "to nearest even, as onnx.helper.float32_to_bfloat16 and ONNX Runtime do (onnx/onnx#3876)",
          None, ("test_cast_FLOAT_to_BFLOAT16",)),

    # --- Run; must raise the named error --------------------------------------------------------
    Group("bfloat16 graph inputs: numpy has no bfloat16, ONNX passes the bit patterns as uint16, and "
          "kiln._kiln.Session takes a uint16 array as uint16 (DTypeError: expects bfloat16)",
          "DTypeError", ("test_cast_BFLOAT16_to_FLOAT",)),
    unsupported("string tensors: Kiln has no string dtype",
                "test_cast_FLOAT_to_STRING", "test_cast_STRING_to_FLOAT",
                "test_castlike_FLOAT_to_STRING", "test_castlike_FLOAT_to_STRING_expanded",
                "test_castlike_STRING_to_FLOAT", "test_castlike_STRING_to_FLOAT_expanded",
                "test_strnormalizer_export_monday_casesensintive_lower",
                "test_strnormalizer_export_monday_casesensintive_nochangecase",
                "test_strnormalizer_export_monday_casesensintive_upper",
                "test_strnormalizer_export_monday_empty_output",
                "test_strnormalizer_export_monday_insensintive_upper_twodim",
                "test_strnormalizer_nostopwords_nochangecase",
                "test_strnorm_model_monday_casesensintive_lower",
                "test_strnorm_model_monday_casesensintive_nochangecase",
                "test_strnorm_model_monday_casesensintive_upper",
                "test_strnorm_model_monday_empty_output",
                "test_strnorm_model_monday_insensintive_upper_twodim",
                "test_strnorm_model_nostopwords_nochangecase"),
    unsupported("sequence and optional values: Kiln's graphs carry tensors only (graph inputs or "
                "outputs of sequence/optional type, and the sequence ops)",
                "test_identity_opt", "test_identity_sequence", "test_if_opt", "test_if_seq",
                "test_loop13_seq", "test_loop16_seq_none",
                "test_optional_get_element", "test_optional_get_element_sequence",
                "test_optional_has_element", "test_optional_has_element_empty",
                "test_sequence_insert_at_back", "test_sequence_insert_at_front",
                "test_sequence_map_add_1_sequence_1_tensor", "test_sequence_map_add_1_sequence_1_tensor_expanded",
                "test_sequence_map_add_2_sequences", "test_sequence_map_add_2_sequences_expanded",
                "test_sequence_map_extract_shapes", "test_sequence_map_extract_shapes_expanded",
                "test_sequence_map_identity_1_sequence", "test_sequence_map_identity_1_sequence_expanded",
                "test_sequence_map_identity_1_sequence_1_tensor",
                "test_sequence_map_identity_1_sequence_1_tensor_expanded",
                "test_sequence_map_identity_2_sequences", "test_sequence_map_identity_2_sequences_expanded",
                # SequenceEmpty, SequenceConstruct, SplitToSequence
                "test_sequence_model1", "test_sequence_model2", "test_sequence_model3", "test_sequence_model4",
                "test_sequence_model5", "test_sequence_model6", "test_sequence_model7", "test_sequence_model8"),
    unsupported("ops Kiln does not implement: control flow (If, Loop, Scan)",
                "test_if", "test_loop11", "test_range_float_type_positive_delta_expanded",
                "test_range_int32_type_negative_delta_expanded", "test_scan9_sum", "test_scan_sum"),
    unsupported("ops Kiln does not implement: recurrent layers (RNN, GRU, LSTM)",
                "test_gru_batchwise", "test_gru_defaults", "test_gru_seq_length", "test_gru_with_initial_bias",
                "test_lstm_batchwise", "test_lstm_defaults", "test_lstm_with_initial_bias",
                "test_lstm_with_peepholes", "test_rnn_seq_length", "test_simple_rnn_batchwise",
                "test_simple_rnn_defaults", "test_simple_rnn_with_initial_bias"),
    unsupported("ops Kiln does not implement: quantization (QuantizeLinear, DequantizeLinear, "
                "DynamicQuantizeLinear, QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger)",
                "test_quantizelinear", "test_quantizelinear_axis",
                "test_dequantizelinear", "test_dequantizelinear_axis",
                "test_dynamicquantizelinear", "test_dynamicquantizelinear_expanded",
                "test_dynamicquantizelinear_max_adjusted", "test_dynamicquantizelinear_max_adjusted_expanded",
                "test_dynamicquantizelinear_min_adjusted", "test_dynamicquantizelinear_min_adjusted_expanded",
                "test_qlinearconv", "test_qlinearmatmul_2D", "test_qlinearmatmul_3D",
                "test_convinteger_with_padding", "test_convinteger_without_padding", "test_matmulinteger"),
    unsupported("ops Kiln does not implement: signal processing (DFT, STFT, window functions, "
                "MelWeightMatrix)",
                "test_dft", "test_dft_axis", "test_dft_inverse", "test_stft", "test_stft_with_window",
                "test_blackmanwindow", "test_blackmanwindow_symmetric", "test_hammingwindow",
                "test_hammingwindow_symmetric", "test_hannwindow", "test_hannwindow_symmetric",
                "test_melweightmatrix"),
    unsupported("ops Kiln does not implement: random sampling (Bernoulli, RandomUniformLike)",
                "test_bernoulli", "test_bernoulli_double", "test_bernoulli_seed",
                "test_bernoulli_expanded", "test_bernoulli_double_expanded", "test_bernoulli_seed_expanded"),
    unsupported("ops Kiln does not implement: detection and sampling (NonMaxSuppression, RoiAlign, "
                "GridSample, MaxUnpool)",
                "test_nonmaxsuppression_center_point_box_format", "test_nonmaxsuppression_flipped_coordinates",
                "test_nonmaxsuppression_identical_boxes", "test_nonmaxsuppression_limit_output_size",
                "test_nonmaxsuppression_single_box", "test_nonmaxsuppression_suppress_by_IOU",
                "test_nonmaxsuppression_suppress_by_IOU_and_scores", "test_nonmaxsuppression_two_batches",
                "test_nonmaxsuppression_two_classes", "test_roialign_aligned_false", "test_roialign_aligned_true",
                "test_gridsample", "test_gridsample_aligncorners_true", "test_gridsample_bicubic",
                "test_gridsample_bilinear", "test_gridsample_border_padding", "test_gridsample_nearest",
                "test_gridsample_reflection_padding", "test_gridsample_zeros_padding",
                "test_maxunpool_export_with_output_shape", "test_maxunpool_export_without_output_shape"),
    unsupported("ops Kiln does not implement: Compress, Det, ReverseSequence, TfIdfVectorizer, Unique, "
                "Upsample (deprecated since opset 10)",
                "test_compress_0", "test_compress_1", "test_compress_default_axis", "test_compress_negative_axis",
                "test_det_2d", "test_det_nd", "test_reversesequence_batch", "test_reversesequence_time",
                "test_tfidfvectorizer_tf_batch_onlybigrams_skip0", "test_tfidfvectorizer_tf_batch_onlybigrams_skip5",
                "test_tfidfvectorizer_tf_batch_uniandbigrams_skip5", "test_tfidfvectorizer_tf_only_bigrams_skip0",
                "test_tfidfvectorizer_tf_onlybigrams_levelempty", "test_tfidfvectorizer_tf_onlybigrams_skip5",
                "test_tfidfvectorizer_tf_uniandbigrams_skip5",
                "test_unique_not_sorted_without_axis", "test_unique_sorted_with_axis",
                "test_unique_sorted_with_axis_3d", "test_unique_sorted_with_negative_axis",
                "test_unique_sorted_without_axis", "test_upsample_nearest"),
    unsupported("training-domain op Kiln does not implement: ai.onnx.preview.training Gradient (Kiln "
                "builds gradient graphs itself; see include/kiln/autodiff.h)",
                "test_gradient_of_add", "test_gradient_of_add_and_mul"),
)
