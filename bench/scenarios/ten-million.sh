# ten-million: 10,000,000 members over 2,000 domains of fast sinks, a 10 KB text post (the goal:
# ≥ 20,000 copies/s sustained, ≤ 500 MB peak RSS). Herald only: Postfix would need ten
# million fsync'd queue files (see million.sh). The import through the API is timed as well
# (`import_secs` in the run directory).
MEMBERS=10000000
WORLD_ARGS="--domains 2000 --seed 13"
POSTS="text:10"
TIMEOUT_SECS=3600
POSTFIX=${POSTFIX:-no}
XVERP=no
