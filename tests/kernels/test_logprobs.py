

def test_the_api_s_bound_on_alternatives_is_the_kernel_s():
    from runtime.kernels.logprobs import MAX_TOP
    from runtime.sampling_params import MAX_TOP_LOGPROBS

    assert MAX_TOP == MAX_TOP_LOGPROBS
