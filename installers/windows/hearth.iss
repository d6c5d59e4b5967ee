; Inno Setup script for Hearth on Windows (x64). Build dist\hearth first (make installer, or
; python installers\build.py --no-package), then:
;   iscc /DAppVersion=0.1.0 /DVariant=cpu  installers\windows\hearth.iss
;   iscc /DAppVersion=0.1.0 /DVariant=cuda installers\windows\hearth.iss
; The variant only names the setup program: what runs is the llama.cpp build that was in the
; environment PyInstaller bundled (CPU by default; CMAKE_ARGS=-DGGML_CUDA=on for CUDA).
; Installs per user (no administrator rights), like the login item it can create.

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
#ifndef Variant
  #define Variant "cpu"
#endif
#ifndef DistDir
  #define DistDir "..\..\dist"
#endif
#if Variant == "cpu"
  #define SetupSuffix ""
#else
  #define SetupSuffix "-" + Variant
#endif

[Setup]
AppId={{6E0C4F7B-3A51-4C1E-9C53-6F1B8E2A7D40}
AppName=Hearth
AppVersion={#AppVersion}
AppPublisher=Hearth
DefaultDirName={localappdata}\Programs\Hearth
DefaultGroupName=Hearth
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir={#DistDir}
OutputBaseFilename=Hearth-{#AppVersion}-windows-x64{#SetupSuffix}-setup
SetupIconFile=..\icons\hearth.ico
UninstallDisplayIcon={app}\hearthw.exe
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked
Name: "startonlogin"; Description: "Start Hearth when I log in (in the tray)"; GroupDescription: "Start-up:"; Flags: unchecked

[Files]
Source: "{#DistDir}\hearth\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\Hearth"; Filename: "{app}\hearthw.exe"; Parameters: "app"; IconFilename: "{app}\hearthw.exe"
Name: "{userdesktop}\Hearth"; Filename: "{app}\hearthw.exe"; Parameters: "app"; Tasks: desktopicon

[Registry]
; The same value the app's "Start on login" setting writes (app/autostart.py), so either can remove it.
Root: HKCU; Subkey: "Software\Microsoft\Windows\CurrentVersion\Run"; ValueType: string; ValueName: "Hearth"; ValueData: """{app}\hearthw.exe"" app --tray"; Flags: uninsdeletevalue; Tasks: startonlogin

[Run]
Filename: "{app}\hearthw.exe"; Parameters: "app"; Description: "{cm:LaunchProgram,Hearth}"; Flags: nowait postinstall skipifsilent

[UninstallRun]
; A login item written later by the app's setting is removed with the app.
Filename: "reg.exe"; Parameters: "delete HKCU\Software\Microsoft\Windows\CurrentVersion\Run /v Hearth /f"; Flags: runhidden; RunOnceId: "RemoveRunKey"
