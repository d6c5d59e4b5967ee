"""Info.plist keys of Hearth.app (PyInstaller's BUNDLE adds the executable and icon keys)."""

BUNDLE_ID = "org.hearth.Hearth"


def info_plist(version: str) -> dict:
    return {
        "CFBundleName": "Hearth",
        "CFBundleDisplayName": "Hearth",
        "CFBundleIdentifier": BUNDLE_ID,
        "CFBundleShortVersionString": version,
        "CFBundleVersion": version,
        "LSMinimumSystemVersion": "12.0",
        "NSHighResolutionCapable": True,
        "LSApplicationCategoryType": "public.app-category.productivity",
    }
