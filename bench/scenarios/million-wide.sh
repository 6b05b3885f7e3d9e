# million-wide: 1,000,000 members over 2,000 domains of fast sinks (ten-million's world
# generator at a tenth of the size), a 10 KB text post: what the per-post window costs when it
# is spread over many destinations, in a few minutes rather than ten-million's
# half hour. Compare HERALD_SCHEDULER="queued_copies_per_domain = 0" (the fixed window).
MEMBERS=1000000
WORLD_ARGS="--domains 2000 --seed 13"
POSTS="text:10"
TIMEOUT_SECS=1800
POSTFIX=${POSTFIX:-no}
XVERP=no
