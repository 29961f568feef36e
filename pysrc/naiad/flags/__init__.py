"""tritonserver's command line, read as Triton reads it: the flags Naiad takes for
compatibility, the response cache's, the rate limiter's, and the restricted APIs with
header forwarding."""
