# herald-100k (the first fan-out goal, ≥ 10,000 copies/s): a 10 KB post to 100,000 members across 1,000 domains on
# the fast loopback sink world. Herald only unless POSTFIX=yes.
MEMBERS=100000
WORLD_ARGS="--domains 1000 --seed 5"
POSTS="text:10"
TIMEOUT_SECS=900
POSTFIX=${POSTFIX:-no}
XVERP=no
