"""Pure tests: no root, no processes, no sleeps, no Pilot; the whole tier in seconds."""
