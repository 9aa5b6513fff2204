# template, session 12 call 1 (fresh, one H200): session 11's call A again, unchanged: the headline train phase, and
# in the background the held-out 1536-frame long set with the headline's exact arguments (the long pass then skips it).
bash .gpu/s11c4.sh
