"""The lowest vizdist layer of instrument/ (tfapi aside): what every sub-package needs."""
