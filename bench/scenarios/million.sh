# million: 1,000,000 members over 1,000 domains of fast sinks, a 10 KB text post. Postfix is
# skipped by default (a million fsync'd queue files take hours here): POSTFIX=yes to force it.
MEMBERS=1000000
WORLD_ARGS="--domains 1000 --seed 11"
POSTS="text:10"
TIMEOUT_SECS=1800
POSTFIX=${POSTFIX:-no}
XVERP=no
